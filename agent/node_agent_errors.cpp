// The agent's wiring of the error-file watch (agent/error_file_watch.hpp): a worker whose error file is whole and
// which is still exiting after its grace is a failure then (code 1), and the job is torn down with it.
#include <nlohmann/json.hpp>

#include "agent/node_agent_impl.hpp"
#include "common/time.hpp"
#include "common/timeouts.hpp"

namespace ddprun::agent {

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
  nlohmann::json e = worker_json(w);
  e["event"] = "raised";
  e["node_rank"] = world_.node_rank;
  events_.write(e);
  report_worker_failure(local_rank);  // first, as on_child_exit does: the other nodes start stopping now
  apply(d, "worker_failed");
}

}  // namespace ddprun::agent
