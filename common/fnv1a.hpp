// FNV-1a, 64 bits, over bytes: a hash every node and every build computes alike (std::hash is neither), for
// names and candidates that separate processes must agree on (a SLURM step's ports, a live-view socket's name).
#pragma once

#include <cstdint>
#include <string>
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

// The hash as 16 lower-case hex digits: a file or socket name's part, a fingerprint on the wire.
inline std::string fnv1a_hex(std::string_view text) {
  std::uint64_t h = fnv1a(text);
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<std::size_t>(i)] = "0123456789abcdef"[h & 0xf];
  return out;
}

}  // namespace ddprun
