#include "agent/job_sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <vector>

#include "agent/event_kinds.hpp"
#include "common/process/process_tree.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace {
void kill_everything_started() { process::signal_each(process::descendants_of(::getpid()), SIGKILL); }
}  // namespace

JobSweep::JobSweep(boost::asio::io_context& io, std::chrono::milliseconds term_timeout,
                   const SupervisionPolicy& policy, AgentLifecycle& lifecycle, Logger& log,
                   std::function<void()> grace_over)
    : term_timeout_(term_timeout), policy_(policy), lifecycle_(lifecycle), log_(log),
      grace_over_(std::move(grace_over)), grace_timer_(io) {}

void JobSweep::signal_job(int signal, bool include_descendants) {
  std::vector<pid_t> running;
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0) running.push_back(w.pid);
  process::signal_groups_and_strays(running, signal, include_descendants, is_stop_signal(signal));
}

void JobSweep::suspend_job(EventLog& events) {
  log_.info("received SIGTSTP: stopping the workers and ddprun (fg or SIGCONT resumes them)");
  events.write(event::suspended(unix_ms()));
  signal_worker_groups(SIGTSTP);
  ::raise(SIGSTOP);
}

void JobSweep::resume_job(EventLog& events) {
  log_.info(any_worker_running() ? "continued: waking the workers" : "continued");  // none yet: in the rendezvous, say (issue 34)
  events.write(event::resumed(unix_ms()));
  signal_worker_groups(SIGCONT);
}

void JobSweep::signal_worker_groups(int signal) {
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0) process::signal_group(w.pid, signal);
}

bool JobSweep::any_worker_running() const {
  return std::any_of(policy_.workers().begin(), policy_.workers().end(),
                     [](const WorkerRecord& w) { return w.state == WorkerState::kRunning && w.pid > 0; });
}

void JobSweep::on_worker_reaped() {
  if (policy_.phase() == Phase::kKilling) kill_everything_started();
}

void JobSweep::sweep_leftovers() {
  // SIGTERM goes out once: after a teardown the leftovers already had the teardown's signal, and after success
  // they get it with the first batch that finds them (later batches only see who is left of the same ones).
  const bool killing = lifecycle_.cleanup() == AgentLifecycle::Cleanup::kKilling || policy_.phase() == Phase::kKilling;
  const bool terminate =
      !killing && policy_.phase() == Phase::kRunning && lifecycle_.cleanup() == AgentLifecycle::Cleanup::kNone;
  if (killing || terminate) {
    const auto leftovers = process::descendants_of(::getpid());
    log_.debug(leftovers.size(), " leftover descendant(s): ", killing ? "SIGKILL" : "SIGTERM");
    process::signal_each(leftovers, killing ? SIGKILL : SIGTERM);
  }
  arm_grace();  // also marks the leftovers' one SIGTERM as sent
}

void JobSweep::arm_grace() {
  if (!lifecycle_.arm_grace()) return;
  grace_timer_.expires_after(term_timeout_);
  // An expiry already queued when cancel() comes (the round ended in the same turn) belongs to a grace that is over.
  grace_timer_.async_wait([this, number = grace_number_](const boost::system::error_code& ec) {
    if (!ec && number == grace_number_) on_grace_expired();
  });
}

void JobSweep::on_grace_expired() {
  log_.warning("grace period of ", term_timeout_.count(), " ms over: sending SIGKILL");
  lifecycle_.on_grace_expired();
  grace_over_();
  kill_everything_started();
}

void JobSweep::cancel() {
  ++grace_number_;
  grace_timer_.cancel();
}

}  // namespace ddprun::agent
