// The wiring of the agent's components: what each may ask of this node, and how its decisions are carried out on
// the workers this agent owns. HangInquiry (agent/hang_inquiry.hpp), LiveView (agent/live_view.hpp),
// ErrorFileWatch (agent/error_file_watch.hpp), InPlaceReform (agent/in_place_reform.hpp), FailureReports
// (agent/failure_reports.hpp), WorkerLauncher (agent/worker_launcher.hpp).
#include <unistd.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "agent/node_agent_impl.hpp"
#include "common/process/process_tree.hpp"
#include "common/time.hpp"
#include "common/timeouts.hpp"

namespace ddprun::agent {

HangInquiry::Host NodeAgent::hang_host() {
  HangInquiry::Host h;
  h.round_runs = [this] { return lifecycle_.workers_started() && policy_.phase() == Phase::kRunning; };
  h.outcome_known = [this] { return lifecycle_.outcome_known(); };
  h.node_rank = [this] { return world_.node_rank; };
  h.attempt = [this] { return workers_attempt_; };
  h.named_slow = [this](int rank) { return live_.named_slow(rank); };
  h.round_held = [this] { return reform_.held(); };
  h.send_view = [this](const rendezvous::HangViewMsg& view) { link_.client().report_hang_view(view); };
  h.kill_hung = [this](const std::vector<int>& local_ranks) {
    Decision d;
    for (int lr : local_ranks) {
      if (const Decision one = policy_.on_hung(lr, unix_ms()); one.teardown_began) d = one;
      // SIGKILL: a hung process may never act on SIGTERM, and it has had its chance (a stopped one too).
      process::signal_group(policy_.worker(lr).pid, SIGKILL);
    }
    apply(d, "hung");
    return d.teardown_began;
  };
  h.report_hang = [this](int local_rank, const std::string& message) { reports_.worker_hung(local_rank, message); };
  return h;
}

LiveView::Host NodeAgent::live_view_host() {
  LiveView::Host h;
  h.agent_state = [this] { return std::string(lifecycle_.state_word(policy_.phase() != Phase::kRunning)); };
  h.placed_once = [this] { return lifecycle_.placed_once(); };
  h.finished = [this] { return lifecycle_.finished(); };
  h.found_hung = [this](int local_rank) { return hang_.found_hung(local_rank); };
  h.report_status = [this](std::string status, std::vector<rendezvous::RankPace> paces) {
    link_.client().report_status(std::move(status), std::move(paces));
  };
  h.request_view = [this] { link_.client().request_view(); };
  // SIGKILL, not SIGTERM: a worker that takes SIGTERM as a stop request would exit 0, a success, and leave the
  // others waiting for it.
  h.stop_straggler = [this](int local_rank, const std::string& reason) {
    WorkerRecord& w = policy_.worker(local_rank);
    w.reason = reason;
    log_.warning("rank ", w.rank, " (pid ", w.pid, ") is stopped as a straggler (--straggler-action stop)");
    process::signal_group(w.pid, SIGKILL);
  };
  return h;
}

ErrorFileWatch::Host NodeAgent::error_file_host() {
  ErrorFileWatch::Host h;
  h.raiser_pid = [this](int lr) -> pid_t {
    // Only a running round's own failure: during a re-form in place, or once the job stops, the exit decides.
    if (!lifecycle_.workers_started() || lifecycle_.awaits_reform() || lifecycle_.outcome_known() ||
        policy_.phase() != Phase::kRunning)
      return 0;
    const WorkerRecord& w = policy_.worker(lr);
    return w.state == WorkerState::kRunning ? w.pid : 0;
  };
  h.on_grace_over = [this](int lr, const supervision::ErrorFileContents& ef) { on_raiser_still_exiting(lr, ef); };
  return h;
}

void NodeAgent::on_raiser_still_exiting(int local_rank, const supervision::ErrorFileContents& ef) {
  reaper_.reap_now();  // an exit that came meanwhile is the job's end, with its real status (on_child_exit)
  if (lifecycle_.awaits_reform() || lifecycle_.outcome_known()) return;
  WorkerRecord& w = policy_.worker(local_rank);
  if (w.state != WorkerState::kRunning) return;
  const Decision d = policy_.on_error_file(local_rank, unix_ms());
  if (!d.teardown_began) return;
  w.error_message = ef.message;
  log_.error("rank ", w.rank, " (pid ", w.pid, ") failed: it raised ", ef.message, " (its error file is written; ",
             "its interpreter is still exiting ", timeouts::kRaisedExitGrace.count(), " ms later: code 1, as it will be)");
  events_.write(event::raised(w, world_.node_rank));
  reports_.worker_failed(local_rank);  // first, as on_child_exit does: the other nodes start stopping now
  apply(d, "worker_failed");
}

InPlaceReform::Host NodeAgent::reform_host() {
  InPlaceReform::Host h;
  h.attempt = [this] { return workers_attempt_; };
  h.hang_inquiring = [this] { return hang_.inquiring(); };
  h.pause_hang_watch = [this] { hang_.pause_watch(); };
  h.resume_hang_watch = [this] {
    hang_.start_round(/*handed_over=*/true);
    hang_.watch();
  };
  h.judge_hung = [this](const std::vector<int>& local_ranks) { hang_.judge_not_taken_up(local_ranks); };
  h.note_reform = [this](const rendezvous::StopOrder& order) { note_reform(order, /*in_place=*/true); };
  h.report_stopped = [this] { link_.client().report_stopped(); };
  h.report_round_ready = [this](int round) { return link_.client().report_round_ready(round); };
  h.report_worker_failure = [this](int local_rank) { reports_.worker_failed(local_rank); };
  h.rank_changed = [this](int local_rank, int rank) {
    output_.set_rank(local_rank, rank);
    live_.on_ranks_changed();
  };
  // SIGKILL at once: each had --term-timeout already.
  h.replace_workers = [this] {
    Decision d = policy_.on_external_stop(unix_ms());
    d.signal_all = SIGKILL;
    apply(d, "a worker did not take the re-formed round up; this node's workers start again in the same round");
    maybe_finish();
  };
  return h;
}

FailureReports::Host NodeAgent::reports_host() {
  FailureReports::Host h;
  h.send = [this](const rendezvous::Failure& f) { link_.client().report_failure(f); };
  h.server_away = [this] { return link_.client().reconnecting(); };
  h.hosting = [this] { return link_.hosting(); };
  h.end_job = [this](const JobCause& cause, const char* reason) { on_outcome(&cause, reason); };
  return h;
}

WorkerLauncher::Host NodeAgent::launcher_host() {
  WorkerLauncher::Host h;
  h.facts = [this](int local_rank, const OutputRouting::Target& stdout_target) {
    return worker_facts({config_, world_, layout_, containment_, heartbeats_, hang_}, local_rank, stdout_target);
  };
  h.may_fork = [this] { return policy_.phase() == Phase::kRunning; };  // a signal may have stopped the job
  return h;
}

}  // namespace ddprun::agent
