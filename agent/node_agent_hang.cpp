// The agent's wiring of the hang inquiry (agent/hang_inquiry.hpp): what the inquiry may ask of this node, and
// how its decisions are carried out on the workers this agent owns.
#include <csignal>

#include "agent/node_agent_impl.hpp"
#include "common/process/process_tree.hpp"
#include "common/time.hpp"

namespace ddprun::agent {

HangInquiry::Host NodeAgent::hang_host() {
  HangInquiry::Host h;
  h.round_runs = [this] { return lifecycle_.workers_started() && policy_.phase() == Phase::kRunning; };
  h.outcome_known = [this] { return lifecycle_.outcome_known(); };
  h.node_rank = [this] { return world_.node_rank; };
  h.attempt = [this] { return workers_attempt_; };
  h.named_slow = [this](int rank) { return live_.named_slow(rank); };
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
  h.report_hang = [this](int local_rank, const std::string& message) {
    rendezvous::Failure f = failure_of(policy_.worker(local_rank));
    f.kind = rendezvous::FailureKind::kHung;
    f.signal = SIGKILL;
    f.time_unix_ms = unix_ms();
    f.message = message;
    link_.client().report_failure(f);
  };
  return h;
}

}  // namespace ddprun::agent
