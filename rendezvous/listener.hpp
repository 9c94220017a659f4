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

// Where the acceptor is bound, as the operator reads it: the wildcard says which families it takes.
std::string listening_on(const boost::asio::ip::tcp::acceptor& acceptor, const std::string& bind_address);
// For a server whose token is derived from the run id: what a stranger who reaches the acceptor can do, and how
// to set a token; "" when it listens on loopback only.
std::string open_without_token_warning(const boost::asio::ip::tcp::acceptor& acceptor,
                                       const std::string& bind_address, const std::string& run_id);

// One descriptor per node (a server) or per simulated agent (the load generator): raises the soft open-files limit
// to the hard one (1024 soft is common, and stops a job at about a thousand nodes). Returns the short text of what
// is still missing for `sockets` descriptors (plus a few for the process itself), empty when the limit allows them.
std::string raise_open_files_for(int sockets);

}  // namespace ddprun::rendezvous
