// FNV-1a, 64 bits, over bytes: a hash every node and every build computes alike (std::hash is neither), for
// names and candidates that separate processes must agree on (a SLURM step's ports, a live-view socket's name).
#pragma once

#include <cstdint>
#include <string_view>

namespace ddprun {

inline std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace ddprun
