// The options that watch a running job's workers: hang detection (README "Hang detection") and straggler
// naming (docs/MONITORING.md "Stragglers"), as typed and as the agent and the rendezvous take them.
#pragma once

#include <string>

#include "agent/agent_config.hpp"

namespace CLI {
class App;
}

namespace ddprun::launcher {

struct WatchOptions {
  std::string hang_timeout = "0";
  std::string hang_initial_timeout = "0";
  std::string straggler_threshold = "30";  // percent
  std::string straggler_window = "20";     // seconds
  std::string straggler_action = "name";   // name | stop
};

void define_watch_options(CLI::App& app, WatchOptions& o);
// Throws UsageError (64) for a value out of range or a combination that cannot work.
void apply_watch_options(const WatchOptions& o, agent::AgentConfig& cfg);

}  // namespace ddprun::launcher
