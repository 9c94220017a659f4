#include "launcher/ports.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace ddprun::launcher {
namespace {
// Binds a TCP socket to 0.0.0.0:port and, on success, returns the bound port; -errno on failure.
int try_bind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  int result;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    result = -errno;
  } else {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    result = ntohs(addr.sin_port);
  }
  ::close(fd);
  return result;
}
}  // namespace

int pick_free_port() {
  const int port = try_bind(0);
  if (port < 0) throw SystemError("cannot find a free TCP port", -port);
  return port;
}

std::string port_unavailable_reason(int port) {
  const int r = try_bind(port);
  if (r >= 0) return "";
  return std::strerror(-r);
}

}  // namespace ddprun::launcher
