#include "rendezvous/text.hpp"

#include <sstream>

namespace ddprun::rendezvous::text {

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(duration.count()) / 1000.0 << " s";
  return out.str();
}

std::string host_port(const std::string& host, unsigned port) {
  const bool v6_literal = host.find(':') != std::string::npos && host.front() != '[';  // non-empty: has ':'
  return (v6_literal ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace ddprun::rendezvous::text
