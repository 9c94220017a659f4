#include "rendezvous/text.hpp"

#include <sstream>

namespace ddprun::rendezvous::text {

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(duration.count()) / 1000.0 << " s";
  return out.str();
}

}  // namespace ddprun::rendezvous::text
