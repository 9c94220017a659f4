#include "rendezvous/listener.hpp"

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

}  // namespace ddprun::rendezvous
