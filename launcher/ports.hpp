// MASTER_PORT: picking a free one, or checking that the one asked for is free.
#pragma once

#include <string>

namespace ddprun::launcher {

// A port the kernel reports free on 0.0.0.0 right now (bind to port 0). The worker hosting the
// TCPStore binds it moments later, as with torchrun; a race with another program is possible but rare.
int pick_free_port();

// "" when `port` can be bound on all interfaces (SO_REUSEADDR, as c10d's TCPStore binds), else the reason.
std::string port_unavailable_reason(int port);

}  // namespace ddprun::launcher
