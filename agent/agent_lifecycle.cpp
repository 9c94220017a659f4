#include "agent/agent_lifecycle.hpp"

namespace ddprun::agent {

void AgentLifecycle::on_workers_started() {
  if (stage_ == Stage::kAwaitingRound) stage_ = Stage::kRunning;
}

void AgentLifecycle::on_restart_ordered() {
  if (ending_ == Ending::kJobOver || stage_ == Stage::kFinished) return;  // the end is final
  ending_ = Ending::kRestart;
  if (stage_ == Stage::kAwaitingRound) stage_ = Stage::kNothingRan;
}

void AgentLifecycle::on_dropped() {
  on_restart_ordered();
  if (ending_ == Ending::kRestart) ending_ = Ending::kRejoin;
}

void AgentLifecycle::on_reform_not_taken() {
  if (ending_ != Ending::kOpen || stage_ != Stage::kRunning) return;  // only a running round's own workers
  ending_ = Ending::kRestartInRound;
}

void AgentLifecycle::on_job_over() {
  // A restart's teardown may be under way: it now ends the job instead.
  ending_ = Ending::kJobOver;
  if (stage_ == Stage::kAwaitingRound) stage_ = Stage::kNothingRan;
}

bool AgentLifecycle::on_reform_in_place() {
  if (stage_ != Stage::kRunning || ending_ != Ending::kOpen) return false;
  stage_ = Stage::kReforming;
  ending_ = Ending::kInPlace;
  return true;
}

bool AgentLifecycle::on_reform_assignment() {
  if (ending_ == Ending::kInPlace) ending_ = Ending::kOpen;
  return stage_ == Stage::kReforming;
}

void AgentLifecycle::on_reformed() {
  if (stage_ == Stage::kReforming) stage_ = Stage::kRunning;
  if (ending_ == Ending::kInPlace) ending_ = Ending::kOpen;
}

bool AgentLifecycle::on_processes_gone() {
  if (stage_ != Stage::kRunning && stage_ != Stage::kReforming) return false;
  stage_ = Stage::kRoundOver;
  return true;
}

AgentLifecycle::Next AgentLifecycle::after_drained() {
  if (stage_ != Stage::kRoundOver && stage_ != Stage::kNothingRan) return Next::kWait;
  if (ending_ == Ending::kRestart || ending_ == Ending::kRestartInRound || ending_ == Ending::kRejoin) {
    const Next next = ending_ == Ending::kRestart          ? Next::kBeginNextRound
                      : ending_ == Ending::kRestartInRound ? Next::kRestartInRound
                                                           : Next::kRejoin;
    ending_ = Ending::kOpen;  // once: the next round's begin is under way
    return next;
  }
  if (ending_ != Ending::kJobOver) return Next::kWait;  // e.g. every worker succeeded: the other nodes?
  stage_ = Stage::kFinished;
  return Next::kFinish;
}

void AgentLifecycle::on_next_round() {
  if (stage_ == Stage::kFinished) return;
  stage_ = Stage::kAwaitingRound;
  cleanup_ = Cleanup::kNone;
}

bool AgentLifecycle::arm_grace() {
  if (cleanup_ != Cleanup::kNone) return false;
  cleanup_ = Cleanup::kGracePeriod;
  return true;
}

const char* to_string(AgentLifecycle::Stage stage) {
  switch (stage) {
    case AgentLifecycle::Stage::kAwaitingRound: return "awaiting a round";
    case AgentLifecycle::Stage::kRunning: return "running";
    case AgentLifecycle::Stage::kReforming: return "re-forming in place";
    case AgentLifecycle::Stage::kRoundOver: return "round over";
    case AgentLifecycle::Stage::kNothingRan: return "round over before anything ran";
    case AgentLifecycle::Stage::kFinished: return "finished";
  }
  return "?";
}

const char* AgentLifecycle::state_word(bool workers_stopping) const {
  switch (stage_) {
    case Stage::kAwaitingRound: return placed_once_ ? "restarting" : "rendezvous";
    case Stage::kRunning: return workers_stopping ? "stopping" : "running";
    case Stage::kReforming: return workers_stopping ? "stopping" : "restarting";  // the workers live on
    case Stage::kRoundOver: return restarting() ? "restarting" : "stopping";
    case Stage::kNothingRan:
    case Stage::kFinished: return "done";
  }
  return "?";
}

}  // namespace ddprun::agent
