#include "common/supervision/supervision_policy.hpp"

#include <algorithm>
#include <csignal>

#include <stdexcept>
#include <string>

namespace ddprun::supervision {
namespace {
// A caller's bug (a local rank out of order, an exit reported twice): libc-only, so no DDPRUN_CHECK here.
void require(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("supervision policy: ") + what);
}
}  // namespace


const char* to_string(WorkerState state) {
  switch (state) {
    case WorkerState::kRunning: return "running";
    case WorkerState::kSucceeded: return "succeeded";
    case WorkerState::kFailed: return "failed";
    case WorkerState::kVictim: return "victim";
  }
  return "?";
}

bool is_stop_signal(int signal) {
  return signal == SIGINT || signal == SIGTERM || signal == SIGHUP || signal == SIGQUIT;
}

void SupervisionPolicy::add_worker(int rank, int local_rank, pid_t pid, std::int64_t now_ms) {
  require(static_cast<std::size_t>(local_rank) == workers_.size(), "workers must be added in local rank order");
  WorkerRecord r;
  r.rank = rank;
  r.local_rank = local_rank;
  r.pid = pid;
  r.start_ms = now_ms;
  workers_.push_back(r);
}

WorkerRecord& SupervisionPolicy::worker(int local_rank) {
  return const_cast<WorkerRecord&>(static_cast<const SupervisionPolicy&>(*this).worker(local_rank));
}

const WorkerRecord& SupervisionPolicy::worker(int local_rank) const {
  require(local_rank >= 0 && static_cast<std::size_t>(local_rank) < workers_.size(), "no such local rank");
  return workers_[static_cast<std::size_t>(local_rank)];
}

Decision SupervisionPolicy::begin_teardown(int signal, std::int64_t now_ms) {
  phase_ = Phase::kStopping;
  teardown_ms_ = now_ms;
  Decision d;
  d.signal_all = signal;
  d.arm_grace = true;
  d.teardown_began = true;
  return d;
}

Decision SupervisionPolicy::on_exit(int local_rank, const process::ExitStatus& status, std::int64_t now_ms) {
  WorkerRecord& w = worker(local_rank);
  require(w.state == WorkerState::kRunning, "a worker exited twice");
  if (w.raised) {  // on_error_file made it the failure it is, with its time and code
    w.state = WorkerState::kFailed;
    return {};
  }
  w.status = status;
  w.end_ms = now_ms;
  if (status.success()) {
    w.state = WorkerState::kSucceeded;
    return {};
  }
  if (phase_ != Phase::kRunning && !w.hung) {
    w.state = WorkerState::kVictim;
    return {};
  }
  w.state = WorkerState::kFailed;
  if (w.hung) return {};  // on_hung already made it a failure and began the teardown
  if (root_cause_ < 0) root_cause_ = local_rank;
  return begin_teardown(SIGTERM, now_ms);
}

Decision SupervisionPolicy::on_hung(int local_rank, std::int64_t now_ms) {
  WorkerRecord& w = worker(local_rank);
  if (w.state != WorkerState::kRunning || w.hung) return {};
  w.hung = true;
  if (phase_ != Phase::kRunning) return {};  // already stopping: it is killed with the rest
  if (root_cause_ < 0) root_cause_ = local_rank;
  return begin_teardown(SIGTERM, now_ms);
}

Decision SupervisionPolicy::on_error_file(int local_rank, std::int64_t now_ms) {
  WorkerRecord& w = worker(local_rank);
  if (w.state != WorkerState::kRunning || w.hung || w.raised || phase_ != Phase::kRunning) return {};
  w.raised = true;
  w.status = process::ExitStatus{};
  w.status.code = 1;  // Python's exit for an uncaught exception; the SDK's run_main returns 1 too
  w.end_ms = now_ms;
  if (root_cause_ < 0) root_cause_ = local_rank;
  return begin_teardown(SIGTERM, now_ms);
}

Decision SupervisionPolicy::on_signal(int signal, std::int64_t now_ms) {
  Decision d;
  if (!is_stop_signal(signal)) {  // SIGUSR1/SIGUSR2 and the like: a notice for the workers (SLURM preemption), nothing more
    // It counts for the exit code only when it reached running workers (issue 34: a notice while this node waited in
    // the rendezvous made a job that then completed exit 79).
    if (phase_ == Phase::kRunning && !workers_.empty()) notice_received_ = true;
    d.signal_all = signal;
    return d;
  }
  // Remembered in every phase: a stop signal during a restart's teardown ends the job instead of the
  // next round (the agent asks stop_signal() before it starts over).
  if (stop_signal_ == 0) stop_signal_ = signal;
  if (phase_ == Phase::kRunning) {
    return begin_teardown(signal, now_ms);  // forward the very signal, as torchrun does
  }
  if (phase_ == Phase::kStopping && (signal == SIGINT || signal == SIGQUIT)) {
    // A second Ctrl-C (or Ctrl-\): the user does not want to wait for the grace period.
    phase_ = Phase::kKilling;
    d.signal_all = SIGKILL;
    return d;
  }
  // A second SIGTERM/SIGHUP while tearing down is not passed on: every worker already has its one
  // SIGTERM, and a handler that treats a second one as "abort now" would cut its checkpoint short.
  return d;
}

bool is_stop_of_a_node(const JobCause& cause) {
  return cause.rank < 0 && (cause.exit_code == 128 + SIGTERM || cause.exit_code == kExitPreempted);
}

bool SupervisionPolicy::preempted() const {
  if (!preemption_exit_) return false;
  // A job that failed elsewhere (a worker, a node, the rendezvous) ends with its root cause's code on every node,
  // whatever stop reached this one during the teardown (issue 34: srun -K's SIGTERM, a scancel or a USR1 during a
  // failure's teardown made the other nodes exit 79, and the preemption recipe requeued a failed job). Only a
  // stop that came first, here or on another node, is a preemption.
  const bool stopped_elsewhere = job_cause_ && is_stop_of_a_node(*job_cause_);
  if (job_cause_ && !stopped_elsewhere) return false;
  const bool all_succeeded = !workers_.empty() && std::all_of(workers_.begin(), workers_.end(), [](const WorkerRecord& w) {
    return w.state == WorkerState::kSucceeded;
  });
  // SIGTERM on this node, or on another one (the rendezvous' cause: a node's ddprun got it; scancel and
  // preemption signal every node at about the same time, and the first one to report names the cause).
  const bool terminated = stop_signal_ == SIGTERM ||
                          (job_cause_ && job_cause_->rank < 0 && job_cause_->exit_code == 128 + SIGTERM);
  return all_succeeded && (notice_received_ || terminated);
}

Decision SupervisionPolicy::on_grace_expired(std::int64_t) {
  Decision d;
  if (phase_ != Phase::kStopping) return d;
  phase_ = Phase::kKilling;
  d.signal_all = SIGKILL;
  return d;
}

Decision SupervisionPolicy::on_external_stop(std::int64_t now_ms) {
  if (phase_ != Phase::kRunning) return {};
  external_stop_ = true;
  return begin_teardown(SIGTERM, now_ms);
}

Decision SupervisionPolicy::on_job_cause(JobCause cause, std::int64_t now_ms) {
  job_cause_ = std::move(cause);
  return on_external_stop(now_ms);
}

void SupervisionPolicy::reset_for_restart() {
  workers_.clear();
  phase_ = Phase::kRunning;
  root_cause_ = -1;
  external_stop_ = false;
  teardown_ms_ = 0;
  job_cause_.reset();
}

bool SupervisionPolicy::killed_from_outside(int local_rank, const process::ExitStatus& status) const {
  require(local_rank >= 0 && static_cast<std::size_t>(local_rank) < workers_.size(), "no such local rank");
  const WorkerRecord& w = workers_[static_cast<std::size_t>(local_rank)];
  return status.signaled && status.signal == SIGKILL && phase_ != Phase::kKilling && !w.hung && !w.raised;
}

bool SupervisionPolicy::all_exited() const {
  return std::none_of(workers_.begin(), workers_.end(),
                      [](const WorkerRecord& w) { return w.state == WorkerState::kRunning; });
}

const WorkerRecord* SupervisionPolicy::root_cause() const {
  return root_cause_ < 0 ? nullptr : &workers_[static_cast<std::size_t>(root_cause_)];
}

int SupervisionPolicy::exit_code() const {
  if (preempted()) return kExitPreempted;
  if (job_cause_) return job_cause_->exit_code == 0 ? 1 : job_cause_->exit_code;
  if (const WorkerRecord* root = root_cause()) {
    if (root->hung) return kExitHung;
    const int code = root->status.shell_code();
    return code == 0 ? 1 : code;
  }
  if (stop_signal_ != 0) return 128 + stop_signal_;
  if (external_stop_) return 1;
  return 0;
}

}  // namespace ddprun::supervision
