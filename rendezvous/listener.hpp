// Opening a listening socket for the server.
#pragma once

#include <cstdint>
#include <string>

#include <boost/asio/ip/tcp.hpp>

namespace ddprun::rendezvous {

// The default bind address: every address of the machine, IPv6 and IPv4 on one socket. open_listener binds "::"
// with IPV6_V6ONLY off (whatever net.ipv6.bindv6only says), and falls back to 0.0.0.0 on a kernel without IPv6.
// An explicit "0.0.0.0" stays IPv4 only, an explicit "::" with the fallback is the same as this.
inline constexpr const char* kEveryAddress = "::";

// Binds (with SO_REUSEADDR) to bind_address — an IP address or a host name — and `port` (0 = a free one),
// and listens unless `listen` is false. Throws ConnectionError naming the address and the OS's reason.
boost::asio::ip::tcp::acceptor open_listener(boost::asio::io_context& io, const std::string& bind_address,
                                             std::uint16_t port, bool listen = true);

}  // namespace ddprun::rendezvous
