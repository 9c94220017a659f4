#include "agent/worker_plan.hpp"

#include <unistd.h>

#include "agent/env_contract.hpp"
#include "agent/heartbeat_channel.hpp"

namespace ddprun::agent {

process::SpawnOptions plan_worker(const AgentConfig& config, const World& world, int local_rank,
                                  const WorkerFacts& facts) {
  process::SpawnOptions opts;
  opts.program = config.program;
  opts.argv = config.argv;
  if (!config.local_rank_arg.empty())  // --local-rank-arg, where torch.distributed.launch put it
    opts.argv.insert(opts.argv.begin() + static_cast<std::ptrdiff_t>(config.local_rank_arg_at),
                     config.local_rank_arg + "=" + std::to_string(local_rank));
  // --stdin-rank: ddprun's stdin goes to that rank alone (the others read /dev/null). From a terminal where
  // ddprun is the foreground job, the rank's group becomes the foreground group, or reading (pdb) would stop
  // it with SIGTTIN; the agent hands the terminal back when it exits.
  if (world.rank_offset + local_rank == config.stdin_rank) {
    opts.stdin_fd = STDIN_FILENO;
    opts.take_terminal = facts.stdin_is_foreground_terminal;
  }
  WorkerEnvInputs env_in;
  env_in.local_rank = local_rank;
  env_in.error_file = facts.error_file;
  env_in.agent_pid = facts.agent_pid;
  env_in.job_tag = facts.job_tag;
  env_in.console_tty = facts.stdout_to_terminal_only;
  opts.cgroup_procs_fd = facts.cgroup_procs_fd;
  opts.cgroup_dir_fd = facts.cgroup_dir_fd;
  opts.guard_fd = facts.guard_fd;
  if (facts.heartbeat_fd >= 0) {
    env_in.heartbeat_fd = facts.heartbeat_fd;
    env_in.heartbeat_offset = HeartbeatChannel::offset_of(local_rank);
    env_in.reform_file = facts.reform_file;
    opts.inherit_fds.push_back(facts.heartbeat_fd);
  }
  if (config.hang_timeout.count() > 0) {
    env_in.stacks_file = facts.stacks_file;
    env_in.stacks_signal = facts.stacks_signal;
    env_in.flight_recorder_prefix = facts.flight_recorder_prefix;
  }
  opts.env = worker_environment(config.base_env, world, env_in);
  return opts;
}

}  // namespace ddprun::agent
