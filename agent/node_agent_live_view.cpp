// The agent's wiring of the live view (agent/live_view.hpp): what the view may ask of this node, and how its
// one decision (a straggler to stop) is carried out on the workers this agent owns.
#include <csignal>

#include "agent/node_agent_impl.hpp"
#include "common/process/process_tree.hpp"

namespace ddprun::agent {

LiveView::Host NodeAgent::live_view_host() {
  LiveView::Host h;
  h.agent_state = [this] { return agent_state(); };
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

// The agent's word in the live view: what its lifecycle and its policy say together.
std::string NodeAgent::agent_state() const {
  switch (lifecycle_.stage()) {
    case AgentLifecycle::Stage::kAwaitingRound: return lifecycle_.placed_once() ? "restarting" : "rendezvous";
    case AgentLifecycle::Stage::kRunning:
      return policy_.phase() == Phase::kRunning ? "running" : "stopping";
    case AgentLifecycle::Stage::kReforming:  // the workers live on into the next round
      return policy_.phase() == Phase::kRunning ? "restarting" : "stopping";
    case AgentLifecycle::Stage::kRoundOver: return lifecycle_.restarting() ? "restarting" : "stopping";
    case AgentLifecycle::Stage::kNothingRan:
    case AgentLifecycle::Stage::kFinished: return "done";
  }
  return "?";
}

}  // namespace ddprun::agent
