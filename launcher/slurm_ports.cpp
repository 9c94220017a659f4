#include "launcher/slurm_ports.hpp"

#include <algorithm>
#include <string>

#include "common/fnv1a.hpp"

namespace ddprun::launcher {
namespace {

// splitmix64's finalizer: every input bit moves every output bit. FNV-1a alone does not (issue 34: with the index
// as the key's last character, a candidate's low bits followed from the first one's, so over job ids 1-100 000
// there were only 126 distinct 8-port lists, and two jobs that shared one candidate shared all 8).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<int> slurm_rdzv_ports(std::uint64_t job_id, std::uint64_t step_id) {
  std::vector<int> ports;
  const std::uint64_t key = fnv1a(std::to_string(job_id) + "." + std::to_string(step_id));
  for (std::uint64_t i = 0; static_cast<int>(ports.size()) < kSlurmPortCandidates; ++i) {
    const int port = kSlurmPortBase + static_cast<int>(mix(key ^ mix(i)) % kSlurmPortSpan);
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
  }
  return ports;
}

}  // namespace ddprun::launcher
