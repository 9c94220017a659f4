// MASTER_PORT: picking a free one, or checking that the one asked for is free.
#pragma once

#include <string>

namespace ddprun::launcher {

// A free port on 0.0.0.0 for MASTER_PORT, outside the kernel's ephemeral range (process::pick_master_port):
// the worker hosting the TCPStore binds it moments later, and no port the kernel hands out meanwhile can take
// it (torchrun's bind to port 0 can lose that race). Throws SystemError.
int pick_free_port();

// "" when `port` can be bound on all interfaces (SO_REUSEADDR, as c10d's TCPStore binds), else the reason.
std::string port_unavailable_reason(int port);

}  // namespace ddprun::launcher
