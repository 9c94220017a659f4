// Probing TCP ports with nothing but libc, for the launcher (MASTER_PORT) and the worker SDK's embedded
// spawn, which must not depend on Boost.
#pragma once

#include <string>
#include <utility>

namespace ddprun::process {

// Binds a TCP socket with SO_REUSEADDR (as c10d's TCPStore binds) to `ipv4_address` (an IPv4 literal or
// "localhost"; anything else means all interfaces) and `port` (0: one the kernel picks), then closes it.
// Returns the bound port, or -errno when the bind failed.
int probe_tcp_port(const std::string& ipv4_address, int port);

// A port for MASTER_PORT, which rank 0's c10d store binds only later: a free one (probed as above) outside
// the kernel's ephemeral range, so that the ports the kernel hands out meanwhile (every connect(), every bind
// to port 0 on this machine) can never take it between this pick and the store's bind. Random in
// 20000..(the range's low end - 1) (torchrun's default 29500 is there), else above the range; the kernel's
// choice (port 0) when neither has room or nothing there is free. Returns the port, or -errno.
int pick_master_port(const std::string& ipv4_address);

// The kernel's ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range); Linux's default when unreadable.
std::pair<int, int> ephemeral_port_range();

}  // namespace ddprun::process
