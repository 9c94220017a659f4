// What the rendezvous server is told about the job: passed by value, validated once.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "rendezvous/framing.hpp"

namespace ddprun::rendezvous {

struct JobConfig {
  std::string run_id;
  std::string token;   // the shared secret agents must prove they hold (auth.hpp)
  // Expected nodes: --nnodes N is min = max = N; an elastic range min:max waits `last_call` after min joined.
  int min_nodes = 1;
  int max_nodes = 1;
  // Static: every node brings its node rank (--node-rank, SLURM_NODEID); needs min == max.
  // Dynamic: the server assigns node ranks, sorted by (host, address, join order), so the same set of
  // machines gets the same ranks every time.
  bool static_node_ranks = false;
  std::chrono::milliseconds heartbeat_interval{1000};  // told to every client in the challenge
  std::chrono::milliseconds heartbeat_timeout{5000};   // silence after which a node (or the server) is lost
  std::chrono::milliseconds join_timeout{900'000};     // --rdzv-timeout: server start → all nodes joined
  std::chrono::milliseconds last_call{30'000};         // elastic only, see above
  int max_restarts = 0;                                // restart rounds after worker failures
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
};

// Throws ddprun::rendezvous::RendezvousError with a message fit for a user if the config is inconsistent.
void validate(const JobConfig& config);

}  // namespace ddprun::rendezvous
