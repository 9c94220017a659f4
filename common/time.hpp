#pragma once
#include <chrono>
#include <cstdint>
namespace ddprun {
// Wall-clock time as Unix milliseconds: what reports and events carry (comparable across nodes).
inline std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace ddprun
