// The rendezvous ports of a SLURM step, when --rdzv-port is not given.
//
// Every node of a step computes the same list from the job and step ids alone: node 0 hosts on the first it
// can bind, the others look for it there in the same order (rendezvous/client.hpp more_ports), and tell their
// own job's server from another's by its proof of the token and run id (rendezvous/auth.hpp). Two steps of one
// allocation, or two jobs whose ids collide in one slot, each get a port; a port another program holds is
// passed by. Each candidate is its own hash of job, step and index over 29400-30399, so that two jobs that
// collide on one port rarely collide on the next (about 1 in 1 000).
#pragma once

#include <cstdint>
#include <vector>

namespace ddprun::launcher {

inline constexpr int kSlurmPortBase = 29400;
inline constexpr int kSlurmPortSpan = 1000;
inline constexpr int kSlurmPortCandidates = 8;

// kSlurmPortCandidates distinct ports in [kSlurmPortBase, kSlurmPortBase + kSlurmPortSpan).
std::vector<int> slurm_rdzv_ports(std::uint64_t job_id, std::uint64_t step_id);

}  // namespace ddprun::launcher
