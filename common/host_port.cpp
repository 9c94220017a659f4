#include "common/host_port.hpp"

namespace ddprun {

std::string split_host_port(const std::string& text, std::string& host, std::string& port) {
  host = text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return "missing ']'";
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return "not HOST:PORT";
      port = text.substr(close + 2);
    }
  } else if (const auto colon = text.rfind(':'); colon != std::string::npos && text.find(':') == colon) {
    host = text.substr(0, colon);  // one colon: host:port; more (a bare IPv6 address): all host
    port = text.substr(colon + 1);
  }
  return "";
}

}  // namespace ddprun
