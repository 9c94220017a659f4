#include "rendezvous/listener.hpp"

#include <sys/resource.h>

#include <boost/asio/ip/v6_only.hpp>
#include <chrono>
#include <random>
#include <thread>

#include "common/error.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using text::host_port;

namespace {

constexpr int kListenRaceAttempts = 8;

tcp::endpoint endpoint_of(asio::io_context& io, const std::string& bind_address, std::uint16_t port) {
  error_code ec;
  auto address = asio::ip::make_address(bind_address, ec);
  if (!ec) return tcp::endpoint(address, port);
  tcp::resolver resolver(io);
  auto results = resolver.resolve(bind_address, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty())
    throw ConnectionError("cannot listen on " + host_port(bind_address, port) + ": cannot resolve the address (" +
                          ec.message() + ")");
  return results.begin()->endpoint();
}

// Opens and binds; the error is the OS's, for the caller to word (or to fall back on).
error_code try_bind(tcp::acceptor& acceptor, const tcp::endpoint& endpoint, bool dual_stack) {
  error_code ec;
  acceptor.open(endpoint.protocol(), ec);
  // IPv4 clients arrive as v4-mapped addresses (::ffff:a.b.c.d); address_text() writes them back as IPv4.
  if (!ec && dual_stack) acceptor.set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
  }
  return ec;
}

// The kernel has no IPv6 (ipv6.disable=1: no AF_INET6 socket), or refuses the unspecified IPv6 address.
bool no_ipv6(const error_code& ec) {
  return ec == asio::error::address_family_not_supported || ec == boost::system::errc::address_not_available;
}

}  // namespace

tcp::acceptor open_listener(asio::io_context& io, const std::string& bind_address, std::uint16_t port,
                            bool listen) {
  const tcp::endpoint endpoint = endpoint_of(io, bind_address, port);
  const bool every_address = endpoint.address().is_v6() && endpoint.address().is_unspecified();
  tcp::acceptor acceptor(io);
  std::minstd_rand jitter(std::random_device{}());
  for (int attempt = 1;; ++attempt) {
    error_code ec = try_bind(acceptor, endpoint, every_address);
    if (ec && every_address && no_ipv6(ec)) ec = try_bind(acceptor, tcp::endpoint(tcp::v4(), port), false);
    if (!ec && listen) {
      acceptor.listen(asio::socket_base::max_listen_connections, ec);
      // Two agents of one machine racing to host the same endpoint (dynamic mode): with SO_REUSEADDR both binds
      // succeed, and Linux then refuses listen() to each while the other is bound, so neither hosted and both
      // waited for a server until the rendezvous timeout. Let go and try again after a random few ms: one of them
      // listens, and the other's bind then fails as it should (it joins as a client).
      if (ec == asio::error::address_in_use && port != 0 && attempt < kListenRaceAttempts) {
        error_code ignored;
        acceptor.close(ignored);
        std::this_thread::sleep_for(std::chrono::milliseconds(1 + jitter() % 20));
        continue;
      }
    }
    if (ec) throw ConnectionError("cannot listen on " + host_port(bind_address, port) + ": " + ec.message());
    return acceptor;
  }
}

std::string listening_on(const tcp::acceptor& acceptor, const std::string& bind_address) {
  error_code ec;
  const auto endpoint = acceptor.local_endpoint(ec);
  const std::uint16_t port = ec ? 0 : endpoint.port();
  if (ec || !endpoint.address().is_unspecified()) return host_port(bind_address, port);
  if (endpoint.address().is_v6()) return "[::]:" + std::to_string(port) + " (every address, IPv6 and IPv4)";
  return "0.0.0.0:" + std::to_string(port) + (bind_address == "0.0.0.0" ? "" : " (every address; no IPv6 here)");
}

std::string open_without_token_warning(const tcp::acceptor& acceptor, const std::string& bind_address,
                                       const std::string& run_id) {
  error_code ec;
  const auto endpoint = acceptor.local_endpoint(ec);
  if (!ec && endpoint.address().is_loopback()) return {};
  return "the rendezvous listens on " + listening_on(acceptor, bind_address) + " without a secret token (it is "
         "derived from the run id \"" + run_id + "\"): anyone who can reach this port and knows or guesses the run "
         "id can join first and become node 0, which sets every worker's MASTER_ADDR and MASTER_PORT, or report a "
         "failure that stops the job with any root cause they like. Give every node the same secret: "
         "--rdzv-token-file FILE or DDPRUN_TOKEN (e.g. head -c 32 /dev/urandom | base64 > FILE)";
}

std::string raise_open_files_for(int sockets) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::getrlimit(RLIMIT_NOFILE, &limit);
  }
  const auto needed = static_cast<rlim_t>(sockets) + 64;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return {};
  return "the open-files limit is " + std::to_string(limit.rlim_cur) + ", below the " + std::to_string(needed) +
         " that " + std::to_string(sockets) + " connections need";
}

}  // namespace ddprun::rendezvous

