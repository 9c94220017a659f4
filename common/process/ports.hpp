// Probing TCP ports with nothing but libc, for the launcher (MASTER_PORT) and the worker SDK's embedded
// spawn, which must not depend on Boost.
#pragma once

#include <string>

namespace ddprun::process {

// Binds a TCP socket with SO_REUSEADDR (as c10d's TCPStore binds) to `ipv4_address` (an IPv4 literal or
// "localhost"; anything else means all interfaces) and `port` (0: one the kernel picks), then closes it.
// Returns the bound port, or -errno when the bind failed.
int probe_tcp_port(const std::string& ipv4_address, int port);

}  // namespace ddprun::process
