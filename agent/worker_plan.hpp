// What one worker is started with, decided before anything is opened or forked: its program and argv (with
// --local-rank-arg where torch.distributed.launch put it), its whole environment (agent/env_contract.hpp), its
// stdin (--stdin-rank), the descriptors it inherits (the heartbeat page) and the cgroup it joins. Pure: every
// fact about this process and its files comes in (WorkerFacts), so the plan is unit-tested without a process
// (tests/agent/worker_plan_test.cpp); agent/worker_launcher.hpp makes the pipes, forks, waits for the exec and
// routes the output.
#pragma once

#include <string>

#include "agent/agent_config.hpp"
#include "agent/world.hpp"
#include "common/process/spawn.hpp"

namespace ddprun::agent {

// What the agent knows of itself and of this round's files for one worker.
struct WorkerFacts {
  int agent_pid = 0;
  std::string job_tag;      // the job guard's ("" = no guard)
  int cgroup_procs_fd = -1;  // the job's cgroup, -1: none
  int cgroup_dir_fd = -1;    // its directory: the worker is created in it (spawn.hpp), -1: it moves in
  int guard_fd = -1;         // the job guard's pipe: the worker tells it its group before exec (spawn.hpp)
  // ddprun's stdin is a terminal whose foreground group is ddprun's own (the worker that reads it takes it over).
  bool stdin_is_foreground_terminal = false;
  // The worker's stdout goes to ddprun's terminal alone (not also to a --tee file): it may draw progress bars.
  bool stdout_to_terminal_only = false;
  int heartbeat_fd = -1;  // the heartbeat page (agent/heartbeat_channel.hpp), -1: none
  std::string error_file;
  std::string reform_file;  // with the heartbeat
  // --hang-timeout only: where its Python stacks go, the signal that asks for them, the Flight Recorder's prefix.
  std::string stacks_file;
  int stacks_signal = 0;
  std::string flight_recorder_prefix;
};

// The spawn options of `local_rank` in `world`; stdout_fd and stderr_fd are left for the caller (its pipes).
process::SpawnOptions plan_worker(const AgentConfig& config, const World& world, int local_rank,
                                  const WorkerFacts& facts);

}  // namespace ddprun::agent
