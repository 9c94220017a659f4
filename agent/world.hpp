// Where this node's workers sit in the job: what the launcher (one node) or the rendezvous (many nodes)
// decided, and everything the worker environment (docs/ENVIRONMENT.md) is computed from.
#pragma once

#include <string>
#include <vector>

namespace ddprun::rendezvous {
struct Assignment;
}

namespace ddprun::agent {

struct World {
  int node_rank = 0;         // GROUP_RANK
  int nnodes = 1;            // GROUP_WORLD_SIZE
  int local_world_size = 1;  // workers on this node
  int rank_offset = 0;       // global rank of this node's local rank 0 (prefix sum of earlier nodes' workers)
  int world_size = 1;        // workers on all nodes
  std::vector<int> nprocs{};  // workers of each node, by node rank (the rendezvous'); empty: local_world_size each
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "none";
  std::string role = "default";
  int restart_count = 0;
  int max_restarts = 0;
};

// The rendezvous placed this node in a round: where it sits now. What this node chose itself (its worker count,
// its role) stays.
void take_assignment(World& w, const rendezvous::Assignment& a);

// "rank 4" or "ranks 4-7": this node's ranks in a log line (issue 34: "ranks 0-0 of 1").
inline std::string ranks_text(const World& w) {
  const int last = w.rank_offset + w.local_world_size - 1;
  return w.local_world_size == 1 ? "rank " + std::to_string(w.rank_offset)
                                 : "ranks " + std::to_string(w.rank_offset) + "-" + std::to_string(last);
}

}  // namespace ddprun::agent
