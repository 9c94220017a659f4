// Opening a listening socket for the server.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/ip/tcp.hpp>

namespace ddprun::rendezvous {

// Binds (with SO_REUSEADDR) to bind_address — an IP address or a host name — and `port` (0 = a free one),
// and listens unless `listen` is false. Throws ConnectionError naming the address and the OS's reason.
boost::asio::ip::tcp::acceptor open_listener(boost::asio::io_context& io, const std::string& bind_address,
                                             std::uint16_t port, bool listen = true);

}  // namespace ddprun::rendezvous
