#include "launcher/ports.hpp"

#include <cstring>

#include "common/error.hpp"
#include "common/process/ports.hpp"

namespace ddprun::launcher {

int pick_free_port() {
  const int port = process::pick_master_port("0.0.0.0");
  if (port < 0) throw SystemError("cannot find a free TCP port", -port);
  return port;
}

std::string port_unavailable_reason(int port) {
  const int r = process::probe_tcp_port("0.0.0.0", port);
  return r >= 0 ? "" : std::strerror(-r);
}

}  // namespace ddprun::launcher
