#include "common/process/ports.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <random>

namespace ddprun::process {

int probe_tcp_port(const std::string& ipv4_address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const std::string literal = ipv4_address == "localhost" ? "127.0.0.1" : ipv4_address;
  if (::inet_pton(AF_INET, literal.c_str(), &addr.sin_addr) != 1) addr.sin_addr.s_addr = htonl(INADDR_ANY);
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

std::pair<int, int> ephemeral_port_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  if (in >> lo >> hi && 0 < lo && lo <= hi && hi <= 65535) return {lo, hi};
  return {32768, 60999};
}

int pick_master_port(const std::string& ipv4_address) {
  constexpr int kLowest = 20000;
  constexpr int kMinRoom = 1000;  // fewer candidates than this: collisions with other pickers get likely
  constexpr int kTries = 64;
  const auto [lo, hi] = ephemeral_port_range();
  int first = 0, last = -1;
  if (lo - 1 - kLowest >= kMinRoom) {
    first = kLowest;
    last = lo - 1;
  } else if (65535 - (hi + 1) >= kMinRoom) {
    first = hi + 1;
    last = 65535;
  }
  if (first > 0) {
    std::mt19937 random(std::random_device{}());
    std::uniform_int_distribution<int> port(first, last);
    for (int i = 0; i < kTries; ++i) {
      const int r = probe_tcp_port(ipv4_address, port(random));
      if (r > 0) return r;
    }
  }
  return probe_tcp_port(ipv4_address, 0);
}

}  // namespace ddprun::process
