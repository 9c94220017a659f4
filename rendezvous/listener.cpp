#include "rendezvous/listener.hpp"

#include "common/error.hpp"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

tcp::acceptor open_listener(asio::io_context& io, const std::string& bind_address, std::uint16_t port,
                            bool listen) {
  auto where = bind_address + ":" + std::to_string(port);
  boost::system::error_code ec;
  tcp::endpoint endpoint;
  auto address = asio::ip::make_address(bind_address, ec);
  if (!ec) {
    endpoint = tcp::endpoint(address, port);
  } else {
    tcp::resolver resolver(io);
    auto results = resolver.resolve(bind_address, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || results.empty())
      throw ConnectionError("cannot listen on " + where + ": cannot resolve the address (" + ec.message() + ")");
    endpoint = results.begin()->endpoint();
  }
  tcp::acceptor acceptor(io);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec && listen) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw ConnectionError("cannot listen on " + where + ": " + ec.message());
  return acceptor;
}

}  // namespace ddprun::rendezvous
