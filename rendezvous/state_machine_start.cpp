// Start failures: a node that cannot take part says so, and a job of fixed size ends at once with its reason
// instead of waiting --rdzv-timeout for it (a SLURM step starts every node together: one that fails at start
// is not coming). Two ways in:
//  - a joiner cannot join (munged down there): its hello carries cannot_join and no credential. It must still
//    prove the job's token and run id (the MAC), not its uid: that is what it cannot do. Accepted only while the
//    first round gathers, so a stranger who knows the run id and the token can at worst end a job that has not
//    started (docs/MULTINODE.md says so); once running, a cannot_join is only logged.
//  - node 0, which hosts the server, cannot start (its munged is down): CannotStart. Its server then answers
//    every node that comes with the reason (kUnavailable) until all know it, or its agent's linger ends.
#include "common/exit_codes.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/state_machine_rules.hpp"

namespace ddprun::rendezvous {

bool every_node_informed(const RendezvousState& state) { return state.informed >= state.config.max_nodes; }

namespace rules {
namespace {

void informed_at_stop(RendezvousState& state, int failing_nodes) {
  state.informed = failing_nodes + static_cast<int>(state.nodes.size());  // the stop reaches every joined node
}

}  // namespace

void on_cannot_start(RendezvousState& state, const CannotStart& event, Actions& out) {
  if (state.phase != Phase::kJoining) return;
  informed_at_stop(state, 1);
  stop_job(state, event.failure, "a node could not start", out);
}

bool on_start_failure_hello(RendezvousState& state, const Hello& event, const Now& now, Actions& out) {
  const HelloMsg& hello = event.hello;
  const bool ended_by_start_failure =
      state.phase == Phase::kStopped && state.root_cause && is_start_failure(*state.root_cause);
  if (hello.cannot_join.empty() && !ended_by_start_failure) return false;
  const JobConfig& config = state.config;
  // Not this job's node (or another protocol): the usual checks refuse it, with the usual answer.
  if (hello.version != kProtocolVersion || hello.run_id != config.run_id ||
      !verify_mac(config.token, event.nonce, config.run_id, hello.mac))
    return false;
  const std::string who = "host \"" + hello.host + "\" (" + event.peer_address + ")";
  if (hello.cannot_join.empty()) {  // a node late for a job a start failure ended: it learns why
    ++state.informed;
    out.push_back(Send{event.conn, ErrorMsg{ErrorKind::kUnavailable, "the job ended before this node joined: " +
                                                                          describe(*state.root_cause)}});
    out.push_back(Close{event.conn});
    out.push_back(Log{LogLevel::kInfo, "told " + who + " that the job ended before it joined"});
    return true;
  }
  out.push_back(Close{event.conn});
  if (state.phase != Phase::kJoining || is_elastic(config)) {
    // Running, or an elastic job that may gather enough nodes without it: nothing to end.
    out.push_back(Log{LogLevel::kWarning, "node " + who + " could not start: " + hello.cannot_join +
                                              (state.phase == Phase::kJoining ? "; the job gathers without it"
                                                                              : "; the job goes on without it")});
    return true;
  }
  Failure failure;
  failure.kind = FailureKind::kCannotStart;
  failure.node_rank = hello.node_rank.value_or(-1);
  failure.host = hello.host;
  failure.exit_code = kExitUnavailable;
  failure.message = hello.cannot_join;
  failure.time_unix_ms = now.unix_ms;
  informed_at_stop(state, 1);
  stop_job(state, std::move(failure), "a node could not start", out);
  return true;
}

}  // namespace rules
}  // namespace ddprun::rendezvous
