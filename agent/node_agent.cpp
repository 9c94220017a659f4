#include "agent/node_agent.hpp"

#include "agent/node_agent_impl.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <csignal>
#include <nlohmann/json.hpp>

#include "agent/error_file.hpp"
#include "agent/output_pump.hpp"
#include "common/console.hpp"
#include "common/contract/worker_contract.hpp"
#include "common/process/process_tree.hpp"
#include "common/process/spawn.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace {
namespace asio = boost::asio;
using nlohmann::json;

// The signals the agent answers on its loop: stop signals (teardown), notices (forwarded) and job control
// (Ctrl-Z pauses the whole job, fg resumes it: suspend_job, resume_job).
sigset_t job_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT})
    // One ddprun inherited ignored (nohup, `trap '' HUP`) is left ignored and unblocked, so the kernel
    // drops it (a blocked signal is queued even when ignored); its workers inherit it ignored (spawn).
    if (!process::ignored_at_start(sig)) sigaddset(&set, sig);
  return set;
}

// A worker's end in the log: an error for a failure; one that raised was said when its error file came
// (on_raiser_still_exiting), so now only its end.
void log_worker_end(const Logger& log, const WorkerRecord& w, pid_t pid, const process::ExitStatus& status) {
  if (w.raised)
    log.debug("rank ", w.rank, " (pid ", pid, ") ended (", status.describe(), ") after its error file");
  else if (w.state == WorkerState::kFailed)
    log.error("rank ", w.rank, " (pid ", pid, ") failed: ", status.describe(), w.reason.empty() ? "" : ": ", w.reason);
  else
    log.debug("rank ", w.rank, " (pid ", pid, ") ", to_string(w.state), ": ", status.describe());
}
}  // namespace

NodeAgent::NodeAgent(const AgentConfig& config)
    : config_(config), world_(config.world), log_(config.log.for_part("ddprun")),
      signals_(io_, job_signals()),
      reaper_(io_, [this](pid_t pid, const process::ExitStatus& s) { on_child_exit(pid, s); },
              [this](bool has_children) { after_reap(has_children); }),
      peer_signal_(io_, log_),
      link_(io_, config, rendezvous_handlers()),
      containment_(io_, log_), output_(io_, config_, world_, log_, events_, [this] { maybe_finish(); }), probe_(io_),
      hang_(io_, config_, heartbeats_, layout_, policy_, log_, events_, hang_host()),
      live_(io_, config_, world_, heartbeats_, policy_, log_, events_, live_view_host()),
      errors_(io_, error_file_host()),
      sweep_(io_, config_.term_timeout, policy_, lifecycle_, log_,
             [this] { apply(policy_.on_grace_expired(unix_ms()), "grace_expired"); }),
      reform_(io_, config_, world_, heartbeats_, policy_, lifecycle_, layout_, log_, events_, reform_host()),
      launcher_(config_, world_, layout_, output_, launcher_host()),
      reports_(io_, config_, world_, policy_, lifecycle_, log_, reports_host()), slurm_end_(io_, log_) {}

int NodeAgent::run() {
  // Set-up that can fail comes first, so that a failure leaves no worker started.
  layout_ = RunLayout::create(config_.log_dir, config_.world.run_id);
  if (!layout_.note().empty()) log_.warning(layout_.note());
  try {
    layout_.prepare_attempt(world_.restart_count, config_.world.local_world_size);
    if (!config_.events_file.empty()) events_ = EventLog(config_.events_file);
    // Always: the live view's steps and straggler naming read the beats too; only --hang-timeout judges them.
    heartbeats_ = HeartbeatChannel(config_.world.local_world_size);
    // Forks: before the console's threads start.
    containment_.start(layout_.work_root());
    process::become_child_subreaper();
    // From here on ddprun's console and its files are queues with writer threads of their own, so the loop
    // never waits on a terminal, a pipe or a file system that stops draining (common/write_queue.hpp). Only
    // now: the guard (which allocates) must be forked from a single-threaded process (ASan's allocator is
    // not fork-safe with other threads running; glibc's is).
    start_console();
    events_.start();
    for (const auto& note : config_.startup_notes) config_.log.note(note);
  } catch (...) {
    release();
    throw;
  }
  // A console that went away must not kill the agent (workers still need tearing down); workers get
  // SIGPIPE back by default through spawn's reset of dispositions.
  std::signal(SIGPIPE, SIG_IGN);
  // Signals held since main (block_job_signals) stay blocked for good: the signalfd reads them on the loop,
  // those that came early first, each with its sender.
  signals_.start([this](const ReceivedSignal& r) { on_signal(r); });
  output_.start();
  policy_.set_preemption_exit(config_.preemption_exit);
  reaper_.start();
  containment_.watch();

  probe_.start(LoopProbe::period_from_environment());
  // Workers start when the rendezvous assigns this node its place (on_assignment): for one node that is
  // an in-process server and client on loopback, about a millisecond.
  start_ms_ = unix_ms();
  started_ = std::chrono::steady_clock::now();
  if (!config_.cannot_start.empty()) return end_before_start(config_.cannot_start, config_.cannot_start_code);
  try {
    link_.start();
  } catch (const rendezvous::RendezvousError& e) {
    return end_before_start(e.what());
  }
  live_.start(start_ms_);
  io_.run();
  output_.drain_files_after_loop(policy_.stop_signal() != 0);
  if (probe_.running()) log_.info(probe_.report());
  // The job signals are still blocked (the signalfd never unblocks them): a SIGUSR1 or SIGTERM arriving now
  // (a scheduler's notice racing the job's end) is held and discarded at exit, not the job's exit code.

  console::settle();  // a console that broke on the last lines counts them in the summary
  const SummaryContext ctx = summary_context();
  int code = policy_.exit_code();
  if (code != 0 || !ctx.output_losses.empty()) {
    console::write(2, label_lines(summary_text(policy_, ctx), log_.node()));
  } else {
    log_.info(summary_text(policy_, ctx).substr(8));  // "ddprun: " is already in the log tag
  }
  events_.write(summary_json(policy_, ctx));
  code = events_.exit_code_after(code, config_.events_file, stop_signals(), log_);
  release();
  output_.drain_console();
  return code;
}

// The end here, however it came. Every worker and descendant is gone by now (ddprun's sweep): anything the cgroup
// still holds escaped the sweep, and would otherwise run on after the job. Then the run's files, then the guard
// (which kills nothing once dismissed).
void NodeAgent::release() {
  if (const int left = containment_.end_cgroup(); left > 0)
    log_.warning("killed ", left, " process", left == 1 ? "" : "es", " left in the job's cgroup after the job ended");
  layout_.cleanup();
  containment_.dismiss();
}

void start_console() { console::start(kOutputHighWater); }

void say_and_drain(const std::string& line) {
  console::write(2, "ddprun: " + line + "\n");
  console::drain(stop_signals());
}

void block_job_signals() {
  const sigset_t set = job_signals();
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
}

void NodeAgent::on_signal(const ReceivedSignal& received) {
  const int signal = received.signal;
  if (announcing_start_failure_ && is_stop_signal(signal)) return io_.stop();  // the exit stays 69
  if (is_stop_signal(signal) && link_.cut_finish_short()) {
    log_.info("received ", process::signal_name(signal), ": not waiting any longer to tell the other nodes");
    return;
  }
  if (signal == SIGTSTP) return sweep_.suspend_job(events_);  // Ctrl-Z: the job pauses (JobSweep)
  if (signal == SIGCONT) {
    sweep_.resume_job(events_);
    return hang_.on_job_resumed();
  }
  // Every process is gone and only a stalled console holds the end back: a stop signal means "stop
  // waiting for it" (the job's outcome stands; what was not shown is counted in the summary).
  if (lifecycle_.processes_gone() && is_stop_signal(signal) && output_.stalled()) output_.abandon_stalled(signal);
  // In a SLURM step whose proctrack plugin signals every process of the step (cgroup, linuxproc: scancel -s,
  // scancel's SIGTERM, --signal, srun's Ctrl-C), what slurmstepd sends has reached every worker too; sending
  // it again would give each worker two notices (docs/MULTINODE.md, "Signals under SLURM").
  const bool workers_have_it = config_.step_signals_reach_workers && received.sender > 0 &&
                               process_name(received.sender) == "slurmstepd";
  log_.info("received ", process::signal_name(signal), workers_have_it ? " from slurmstepd, which sent it to "
                                                                         "every process of the step" : "");
  events_.write(event::signal(unix_ms(), signal, received.sender));
  if (signal == SIGTERM) ask_slurm_why_stopped();
  Decision d = policy_.on_signal(signal, unix_ms());
  if (workers_have_it && d.signal_all == signal) d.signal_all = 0;
  apply(d, "signal");
  if (d.teardown_began) reports_.signal_received(signal);
}

void NodeAgent::ask_slurm_why_stopped() {
  if (!config_.preemption_exit || lifecycle_.finished()) return;
  slurm_end_.ask(config_.slurm_job_id, config_.slurm_step_nodes, contract::current_environment(),
                 [this](const std::optional<JobCause>& node_failure) {
                   slurm_cause_ = node_failure;
                   if (slurm_cause_) apply(policy_.on_job_cause(*slurm_cause_, unix_ms()), "node_failure");
                   maybe_finish();
                 });
}

void NodeAgent::on_child_exit(pid_t pid, const process::ExitStatus& status) {
  if (hang_.on_child_exit(pid)) return;  // a stack tool of the hang capture
  if (slurm_end_.on_child_exit(pid)) return;  // scontrol, asked why SLURM stopped the step
  auto it = local_rank_of_.find(pid);
  if (it == local_rank_of_.end()) {
    log_.debug("reaped descendant pid ", pid, " (", status.describe(), ")");
    return;
  }
  const int lr = it->second;
  local_rank_of_.erase(it);
  errors_.on_exit(lr);
  containment_.forget_empty_groups();
  // --stdin-rank's worker held the terminal: ddprun's group takes it back, so Ctrl-C reaches ddprun again.
  if (policy_.worker(lr).rank == config_.stdin_rank && ::tcgetpgrp(STDIN_FILENO) == pid)
    process::reclaim_terminal(STDIN_FILENO);
  const std::int64_t now = unix_ms();
  if (!status.success()) {
    const ErrorFileContents ef = read_error_file(layout_.error_file(workers_attempt_, lr));
    if (ef.present) policy_.worker(lr).error_message = ef.message;
  }
  if (policy_.killed_from_outside(lr, status))
    if (std::string oom = containment_.oom_kill_reason(); !oom.empty()) policy_.worker(lr).reason = oom;
  const Decision d = policy_.on_exit(lr, status, now);
  const WorkerRecord& w = policy_.worker(lr);
  events_.write(event::exited(w, world_.node_rank));
  log_worker_end(log_, w, pid, status);
  // The report first: its frame leaves at once (Asio writes speculatively), so the other nodes start stopping
  // while this one scans /proc and signals its own workers (~2 ms saved on every cross-node teardown).
  // While the job re-forms in place the report waits for the new round (InPlaceReform): the rendezvous
  // takes failures during a re-form for the teardown's.
  if (d.teardown_began && w.state == WorkerState::kFailed && !lifecycle_.awaits_reform()) reports_.worker_failed(lr);
  apply(d, "worker_failed");
}

void NodeAgent::apply(const Decision& d, const char* reason) {
  if (d.teardown_began) {
    hang_.cancel();  // stopped for another reason while capturing: the teardown takes the hung worker too
    reform_.cancel();
    // No signal to send: slurmstepd's reached every worker already (on_signal), and a copy would be a second one.
    if (d.signal_all == 0)
      log_.info("tearing down: ", reason, "; slurmstepd already sent it to every worker, ddprun sends no copy");
    else
      log_.info("tearing down: ", reason, ", sending ", process::signal_name(d.signal_all), " to every worker");
    events_.write(event::teardown(policy_.teardown_ms(), reason, d.signal_all));
  }
  // A notice (SIGUSR1, SIGUSR2) is for the workers; anything else reaches every process the job started.
  const bool notice = d.signal_all == SIGUSR1 || d.signal_all == SIGUSR2;
  if (d.signal_all != 0) sweep_.signal_job(d.signal_all, /*include_descendants=*/!notice);
  if (d.arm_grace) sweep_.arm_grace();
}

void NodeAgent::after_reap(bool has_children) {
  // Between rounds (a restart's stragglers reaped before the next assignment) no worker is running, yet
  // the job is not done: only a started round can end.
  if (!lifecycle_.workers_started()) return;
  if (!policy_.all_exited()) return sweep_.on_worker_reaped();
  // Every worker is gone but something they started lives on: it goes the same way, SIGTERM then SIGKILL after
  // the grace period, so no process of the job outlives ddprun.
  if (has_children) return sweep_.sweep_leftovers();
  if (!lifecycle_.on_processes_gone()) return;
  // Every local worker exited 0 and nothing stopped the job: the job ends when every node did the same.
  if (policy_.phase() == Phase::kRunning && (policy_.exit_code() == 0 || policy_.preempted()) &&
      !lifecycle_.outcome_known()) {
    link_.client().report_node_done(policy_.noticed());
    if (world_.nnodes > 1) log_.info("every worker here exited 0; the job ends when every node's have");
  }
  sweep_.cancel();
  output_.arm_drain_limit();
  maybe_finish();
}

void NodeAgent::maybe_finish() {
  if (lifecycle_.finished() || !lifecycle_.processes_gone()) return;
  if (slurm_end_.asking()) return;  // the exit code waits for slurmctld's word (at most SlurmEndQuery::kLimit)
  // A restart does not wait for a stalled console: the round's streams that wait for room there go on
  // draining beside the next round, in order, and the end of the job waits for them all.
  if (!output_.round_drained(lifecycle_.restarting())) return;
  output_.cancel_drain_limit();  // every stream drained: none is left open, however long the job's outcome takes
  switch (const AgentLifecycle::Next next = lifecycle_.after_drained(); next) {
    case AgentLifecycle::Next::kWait:
      return;
    case AgentLifecycle::Next::kBeginNextRound:
    case AgentLifecycle::Next::kRestartInRound:
    case AgentLifecycle::Next::kRejoin:
      // Posted: this may run inside a pump's callback, and the next round destroys the pumps.
      asio::post(io_, [this, next] { begin_next_round(next); });
      return;
    case AgentLifecycle::Next::kFinish:
      break;
  }
  reaper_.stop();
  sweep_.cancel();
  reports_.cancel();
  peer_signal_.cancel();
  hang_.cancel();
  errors_.cancel();
  reform_.cancel();
  probe_.cancel();
  live_.stop();
  containment_.stop_watching();
  // Signals are still read while a hosted server tells the other nodes the end: a stop signal cuts that short.
  link_.finish([this](const EndInEtcd& e) {
    on_end_in_etcd(e);
    signals_.cancel();
  });
}

int run_node_agent(const AgentConfig& config) {
  NodeAgent agent(config);
  return agent.run();
}

}  // namespace ddprun::agent
