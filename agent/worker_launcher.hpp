// Starting a round's workers, the agent's hands on new processes: for each local rank the plan
// (agent/worker_plan.hpp), the output pipes (or /dev/null where a stream goes nowhere), the fork, then the wait
// for its exec; each worker's streams are handed to OutputRouting with its log files. Every worker is forked
// before any exec is waited for, so they exec side by side on every core (issue 35's launch profile: one
// after another, the waits were most of a launch).
//
// A worker that cannot be started is a failure with an exit code and one line saying why: its exec failed
// (126/127, the program's), or a resource ran out (71, with what to raise). The first that cannot be forked
// stops the forking (the next ones would fail the same way). NodeAgent registers what started and reports the
// failure; this component owns no worker once launch() returns.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/output_routing.hpp"
#include "agent/run_layout.hpp"
#include "agent/worker_plan.hpp"
#include "agent/world.hpp"
#include "common/process/wait_status.hpp"

namespace ddprun::agent {
class HangInquiry;
class HeartbeatChannel;
class JobContainment;

// What a worker's plan needs to know of this process and this round's files (WorkerFacts): the job guard's tag
// and the cgroup, whether the worker gets the terminal, its heartbeat slot and the hang inquiry's files where
// those run. It reads the terminal (isatty, tcgetpgrp): the one impure step before the pure plan.
struct FactSources {
  const AgentConfig& config;
  const World& world;
  const RunLayout& layout;
  const JobContainment& containment;
  const HeartbeatChannel& heartbeats;
  const HangInquiry& hang;
};
WorkerFacts worker_facts(const FactSources& from, int local_rank, const OutputRouting::Target& stdout_target);

class WorkerLauncher {
 public:
  struct StartFailure {
    int local_rank = 0;
    process::ExitStatus status;
    std::string reason;
  };
  // What one launch() did, in local rank order.
  struct Round {
    std::vector<pid_t> pids;  // by local rank, for every worker begun: 0 for one that did not start
    std::optional<StartFailure> failed;  // the first failure: the one that stopped the forking, else the first exec's
    std::vector<StartFailure> more;      // exec failures after it (the same program: usually every one)
    std::size_t started() const;
  };
  struct Host {
    // What the plan needs of the agent and its round's files for this worker (WorkerFacts).
    std::function<WorkerFacts(int local_rank, const OutputRouting::Target& stdout_target)> facts;
    std::function<bool()> may_fork;  // false once a signal stopped the job: no more workers are forked
  };

  WorkerLauncher(const AgentConfig& config, const World& world, const RunLayout& layout, OutputRouting& output,
                 Host host);

  // Starts the workers of `world`'s round (local ranks 0..local_world_size-1).
  Round launch();

  // What ran out, and what to do about it, in one line (exposed for its unit test).
  static std::string resource_advice(int err, const std::string& what);

 private:
  struct Starting;
  Starting begin(int local_rank);
  std::optional<StartFailure> finish(Starting& s, pid_t& pid);

  const AgentConfig& config_;
  const World& world_;
  const RunLayout& layout_;
  OutputRouting& output_;
  Host host_;
};

}  // namespace ddprun::agent
