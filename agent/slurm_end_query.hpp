// Why SLURM stopped the step, asked of slurmctld before the exit code is chosen. slurmstepd's SIGTERM reads the
// same for a preemption, a scancel, a time limit and a node failure; only the first is a preemption (exit 79,
// requeue). A node whose slurmd died (or that an admin set DOWN) gets the job NODE_FAIL, and slurmctld ends the
// job's other nodes with that same SIGTERM: their workers, saving on it, exited 0 and every node said "preempted"
// (issue 54: sacct NODE_FAIL, exit 79 everywhere). slurmctld knows the difference, and every node asks it the same
// question, so every node gives the same answer: a lost node, exit 1, naming the node SLURM took down.
//
// `scontrol -o show job` and `scontrol -o show node` run as the agent's child (bounded: kLimit, then SIGKILL),
// their output in a memfd; the agent's reaper hands the exit here (on_child_exit), as for the stack tools.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "common/supervision/supervision_policy.hpp"

namespace ddprun::agent {

// What scontrol's one-line records say about a node failure of the job: the failed nodes of `nodes`' records
// (State DOWN or FAIL, each with SLURM's Reason), when the job's record says JobState=NODE_FAIL, or says no end of
// its own (a preemption, scancel, a time limit, a deadline) while one of its nodes is down. nullopt: no node failure.
// The line: "SLURM ended the job for a node failure: n3 is DOWN (Not responding)". While the job's nodes are
// being cleaned up its JobState reads COMPLETING (not NODE_FAIL): the node's state is what tells.
std::optional<std::string> node_failure_in(const std::string& scontrol_output);

class SlurmEndQuery {
 public:
  static constexpr std::chrono::milliseconds kLimit{3'000};  // below SLURM's smallest usable KillWait
  // A node failure: the job's cause on this node (exit 1, the line of node_failure_in), said in a warning.
  using Done = std::function<void(const std::optional<supervision::JobCause>& node_failure)>;

  SlurmEndQuery(boost::asio::io_context& io, const Logger& log) : timer_(io), log_(log) {}
  ~SlurmEndQuery();
  SlurmEndQuery(const SlurmEndQuery&) = delete;
  SlurmEndQuery& operator=(const SlurmEndQuery&) = delete;

  // Asks once per job (later calls do nothing): `job_id` (SLURM_JOB_ID), `nodes` (the step's node list, a
  // hostlist expression), with `env` (ddprun's: PATH, SLURM_CONF). `done` runs on the loop when scontrol ends or
  // kLimit passes; not when scontrol cannot be started (no answer: nothing changes).
  void ask(const std::string& job_id, const std::string& nodes, const std::vector<std::string>& env, Done done);
  bool asking() const { return pid_ > 0; }
  // True when `pid` was the query (the caller has nothing else to do with it).
  bool on_child_exit(pid_t pid);

 private:
  void finish();

  boost::asio::steady_timer timer_;
  Logger log_;
  bool asked_ = false;
  pid_t pid_ = 0;
  int out_fd_ = -1;  // scontrol's stdout and stderr (a memfd)
  Done done_;
};

}  // namespace ddprun::agent
