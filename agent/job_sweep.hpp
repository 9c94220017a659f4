// The signals that reach the job's processes from this node, and the grace period after a stop, as one
// component of the agent. It decides nothing (SupervisionPolicy and AgentLifecycle say when); it carries the
// signals out and owns the grace timer:
//   - a signal to every running worker's process group and, for a stop, to every process the job started
//     (common/process/process_tree.hpp: one that called setsid, or outlived its worker), woken by SIGCONT so
//     that a stopped one acts on it;
//   - Ctrl-Z and fg passed to each running worker's group;
//   - leftovers once every worker exited: SIGTERM once, then SIGKILL after --term-timeout; while killing,
//     anything a dying worker forked meanwhile;
//   - the grace period: armed once per teardown (AgentLifecycle::arm_grace); when it is over the host applies
//     the policy's verdict and every process the job started gets SIGKILL.
// Only running workers' groups are signalled: a reaped worker's pid may already be someone else's. A stop
// signal is followed by SIGCONT: a stopped process (SIGSTOP, Ctrl-Z, a debugger) gets its grace period too.
#pragma once

#include <cstdint>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>

#include "agent/agent_lifecycle.hpp"
#include "agent/event_log.hpp"
#include "agent/supervision_policy.hpp"
#include "common/log.hpp"

namespace ddprun::agent {

class JobSweep {
 public:
  // `grace_over`: the grace period ended; called before the SIGKILL to everything (the host applies the policy's
  // verdict on who is still there).
  JobSweep(boost::asio::io_context& io, std::chrono::milliseconds term_timeout, const SupervisionPolicy& policy,
           AgentLifecycle& lifecycle, Logger& log, std::function<void()> grace_over);

  // A stop signal or a notice to every running worker's group; with `include_descendants` (a stop) to every
  // process the job started too. A stop is followed by SIGCONT.
  void signal_job(int signal, bool include_descendants);
  // Ctrl-Z (SIGTSTP to ddprun): the job pauses as a shell job would. The workers have their own process
  // groups, so the terminal's SIGTSTP reached only ddprun: it passes it to every running worker's group (a
  // worker that handles it, like an editor, stops its own way), says so in the events file, then stops itself.
  // Returns once continued; the SIGCONT stays pending, for resume_job.
  void suspend_job(EventLog& events);
  // fg or SIGCONT woke ddprun: it wakes the workers. Time stopped is not counted as anyone's silence
  // (common/stall_clock.hpp); other nodes, which go on, see this node silent and end or re-form the job after
  // --heartbeat-timeout.
  void resume_job(EventLog& events);
  // Job control: `signal` (SIGTSTP, SIGCONT) to each running worker's group, nothing else.
  void signal_worker_groups(int signal);
  bool any_worker_running() const;
  // A worker was reaped and others still run: while killing, what the dying ones forked goes too.
  void on_worker_reaped();
  // Every worker exited but something they started lives on: SIGTERM once (SIGKILL while killing), and the
  // grace period for the rest.
  void sweep_leftovers();
  // Once per teardown: SIGKILL to everything when --term-timeout has passed.
  void arm_grace();
  void cancel();

 private:
  void on_grace_expired();

  std::chrono::milliseconds term_timeout_;
  const SupervisionPolicy& policy_;
  AgentLifecycle& lifecycle_;
  Logger& log_;
  std::function<void()> grace_over_;
  boost::asio::steady_timer grace_timer_;
  std::uint64_t grace_number_ = 0;  // cancel(): an expiry already queued is stale
};

}  // namespace ddprun::agent
