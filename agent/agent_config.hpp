// Everything one node's agent needs, validated by the launcher before anything starts.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "agent/world.hpp"
#include "common/log.hpp"

namespace ddprun::agent {

// torchrun's --redirects/--tee value: a bit mask (1 stdout, 2 stderr, 3 both), for all local ranks or
// per local rank ("0:3,1:1"; ranks not named get 0).
struct StdStreams {
  int all = 0;
  std::map<int, int> per_rank;
  bool per_rank_given = false;
  int mask_for(int local_rank) const {
    if (!per_rank_given) return all;
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? 0 : it->second;
  }
};
inline constexpr int kStdout = 1;
inline constexpr int kStderr = 2;

struct OutputConfig {
  std::string prefix_format = "[rank{rank}]: ";  // empty: no prefix (lines are still kept whole)
  std::vector<int> console_local_ranks;          // --local-ranks-filter; empty: every rank
  StdStreams redirects;                          // to files only
  StdStreams tee;                                // to files and the console
};

struct AgentConfig {
  World world;
  std::string program;              // what to execute: a path, or a name looked up in PATH
  std::vector<std::string> argv;    // the worker's argv, argv[0] included
  std::vector<std::string> base_env;
  std::string log_dir;              // empty: error files in a temporary directory, no log files
  OutputConfig output;
  std::chrono::milliseconds term_timeout{30000};
  std::string events_file;          // empty: none
  std::string host;                 // this node's name, for reports
  Logger log;
};

}  // namespace ddprun::agent
