// Who this worker is, read from the environment ddprun (or torchrun, or the embedded spawn) sets up.
#pragma once

#include <string>

namespace ddprun::sdk {

struct WorldInfo {
  int rank = 0;              // RANK: global rank
  int local_rank = 0;        // LOCAL_RANK: rank on this node; chooses the device
  int world_size = 1;        // WORLD_SIZE
  int local_world_size = 1;  // LOCAL_WORLD_SIZE
  int node_rank = 0;         // GROUP_RANK (0 when absent)
  std::string master_addr;   // MASTER_ADDR: where rank 0 hosts the TCPStore
  int master_port = 0;       // MASTER_PORT
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT (0 when absent)
  std::string error_file;    // TORCHELASTIC_ERROR_FILE (empty when absent)

  // Reads the contract. Throws sdk::Error naming the first missing or malformed variable, with a hint
  // to start the program under ddprun (or with --nproc when it supports embedded spawn).
  static WorldInfo from_env();
  // True when the environment looks like a ddprun/torchrun worker's (RANK and WORLD_SIZE are set).
  static bool present_in_env();
};

// The value of an environment variable, or `fallback` when unset.
std::string env_or(const char* name, const std::string& fallback);

}  // namespace ddprun::sdk
