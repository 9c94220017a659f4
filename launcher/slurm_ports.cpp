#include "launcher/slurm_ports.hpp"

#include <algorithm>
#include <string>

namespace ddprun::launcher {
namespace {

// FNV-1a, 64 bits: stable across machines and builds (std::hash is not), which every node must agree on.
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

std::vector<int> slurm_rdzv_ports(std::uint64_t job_id, std::uint64_t step_id) {
  std::vector<int> ports;
  const std::string key = std::to_string(job_id) + "." + std::to_string(step_id) + "#";
  for (int i = 0; static_cast<int>(ports.size()) < kSlurmPortCandidates; ++i) {
    const int port = kSlurmPortBase + static_cast<int>(fnv1a(key + std::to_string(i)) % kSlurmPortSpan);
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
  }
  return ports;
}

}  // namespace ddprun::launcher
