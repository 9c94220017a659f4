// The node agent's lifecycle (agent/agent_lifecycle.hpp): every transition NodeAgent relies on, without a
// process, a socket or a clock.
#include "agent/agent_lifecycle.hpp"

#include <doctest/doctest.h>

#include <string>

using ddprun::agent::AgentLifecycle;
using Stage = AgentLifecycle::Stage;
using Next = AgentLifecycle::Next;
using Cleanup = AgentLifecycle::Cleanup;

TEST_CASE("a one-round job: placed, running, every process gone, drained, then the outcome finishes it") {
  AgentLifecycle l;
  CHECK(l.stage() == Stage::kAwaitingRound);
  CHECK_FALSE(l.workers_started());
  CHECK_FALSE(l.processes_gone());
  l.on_placed();
  l.on_workers_started();
  CHECK(l.stage() == Stage::kRunning);
  CHECK(l.workers_started());
  CHECK(l.on_processes_gone());
  CHECK_FALSE(l.on_processes_gone());  // said once
  CHECK(l.processes_gone());
  CHECK(l.workers_started());  // a fact about the round, still true while it drains
  CHECK(l.after_drained() == Next::kWait);  // every worker here succeeded: the other nodes decide
  l.on_job_over();
  CHECK(l.after_drained() == Next::kFinish);
  CHECK(l.finished());
  CHECK(l.after_drained() == Next::kWait);  // finishing happens once
}

TEST_CASE("the outcome before the processes are gone: the job finishes only once they are") {
  AgentLifecycle l;
  l.on_placed();
  l.on_workers_started();
  l.on_job_over();
  CHECK(l.outcome_known());
  CHECK(l.after_drained() == Next::kWait);  // still running: tearing down
  CHECK(l.on_processes_gone());
  CHECK(l.after_drained() == Next::kFinish);
}

TEST_CASE("a restart: the round ends, the next begins once, and the clean-up starts over") {
  AgentLifecycle l;
  l.on_placed();
  l.on_workers_started();
  CHECK(l.arm_grace());
  l.on_grace_expired();
  CHECK(l.cleanup() == Cleanup::kKilling);
  l.on_restart_ordered();
  CHECK(l.restarting());
  CHECK(l.after_drained() == Next::kWait);  // processes not gone yet
  CHECK(l.on_processes_gone());
  CHECK(l.after_drained() == Next::kBeginNextRound);
  CHECK(l.after_drained() == Next::kWait);  // not twice while the next round's begin is posted
  l.on_next_round();
  CHECK(l.stage() == Stage::kAwaitingRound);
  CHECK(l.cleanup() == Cleanup::kNone);
  CHECK(l.placed_once());  // kept across rounds: the server waits for this node
  CHECK_FALSE(l.workers_started());
  l.on_workers_started();
  CHECK(l.stage() == Stage::kRunning);
}

TEST_CASE("a restart or the job's end before anything ran here leaves nothing to wait for") {
  AgentLifecycle l;
  l.on_restart_ordered();
  CHECK(l.stage() == Stage::kNothingRan);
  CHECK(l.processes_gone());
  CHECK_FALSE(l.workers_started());
  CHECK(l.after_drained() == Next::kBeginNextRound);
  l.on_next_round();
  l.on_job_over();
  CHECK(l.stage() == Stage::kNothingRan);
  CHECK(l.after_drained() == Next::kFinish);
  CHECK_FALSE(l.placed_once());
}

TEST_CASE("the job's end replaces a restart under way, and no restart follows the end") {
  AgentLifecycle l;
  l.on_workers_started();
  l.on_restart_ordered();
  l.on_job_over();
  CHECK_FALSE(l.restarting());
  l.on_restart_ordered();  // a late restart order cannot reopen a finished job
  CHECK(l.outcome_known());
  CHECK(l.on_processes_gone());
  CHECK(l.after_drained() == Next::kFinish);
  l.on_next_round();
  CHECK(l.finished());
}

TEST_CASE("the grace period is armed once per round") {
  AgentLifecycle l;
  l.on_workers_started();
  CHECK(l.arm_grace());
  CHECK(l.cleanup() == Cleanup::kGracePeriod);
  CHECK_FALSE(l.arm_grace());
  l.on_grace_expired();
  CHECK_FALSE(l.arm_grace());
  CHECK(l.cleanup() == Cleanup::kKilling);
}

TEST_CASE("every stage has a name") {
  for (Stage s : {Stage::kAwaitingRound, Stage::kRunning, Stage::kRoundOver, Stage::kNothingRan, Stage::kFinished})
    CHECK(std::string(ddprun::agent::to_string(s)) != "?");
}

TEST_CASE("a re-form in place: the same workers run on into the next round") {
  AgentLifecycle l;
  CHECK_FALSE(l.on_reform_in_place());  // nothing runs yet: nothing to keep
  l.on_placed();
  l.on_workers_started();
  CHECK(l.on_reform_in_place());
  CHECK(l.stage() == Stage::kReforming);
  CHECK(l.reforming());
  CHECK(l.workers_started());  // they live: signals and teardowns reach them
  CHECK_FALSE(l.processes_gone());
  CHECK_FALSE(l.restarting());  // no teardown, no next round to begin
  CHECK(l.after_drained() == Next::kWait);
  CHECK_FALSE(l.on_reform_in_place());  // once per round
  l.on_reformed();
  CHECK(l.stage() == Stage::kRunning);
  CHECK(l.on_reform_in_place());  // and again in the next one
}

TEST_CASE("a re-form in place overtaken: a restart or the end while the round forms goes the usual way") {
  SUBCASE("a restart: the workers go, then the next round begins") {
    AgentLifecycle l;
    l.on_placed();
    l.on_workers_started();
    CHECK(l.on_reform_in_place());
    l.on_restart_ordered();
    CHECK(l.restarting());
    CHECK(l.on_processes_gone());
    CHECK(l.after_drained() == Next::kBeginNextRound);
  }
  SUBCASE("the job's end") {
    AgentLifecycle l;
    l.on_placed();
    l.on_workers_started();
    CHECK(l.on_reform_in_place());
    l.on_job_over();
    CHECK(l.on_processes_gone());
    CHECK(l.after_drained() == Next::kFinish);
  }
  SUBCASE("a worker died: the round is over here, and waits for what the rendezvous says") {
    AgentLifecycle l;
    l.on_placed();
    l.on_workers_started();
    CHECK(l.on_reform_in_place());
    CHECK(l.on_processes_gone());
    CHECK(l.after_drained() == Next::kWait);
    l.on_reformed();  // an assignment that comes now finds nothing to hand over
    CHECK(l.stage() == Stage::kRoundOver);
  }
  SUBCASE("not after a restart was ordered") {
    AgentLifecycle l;
    l.on_placed();
    l.on_workers_started();
    l.on_restart_ordered();
    CHECK_FALSE(l.on_reform_in_place());
  }
}

// Issue 31: what a round leads to had regrown as three flags beside the lifecycle (reform_pending_,
// restart_into_round_, rejoin_pending_). They are Endings now, and each transition is checked here.
TEST_CASE("a re-form in place awaits its assignment until it comes, and a worker lost meanwhile says so") {
  AgentLifecycle l;
  l.on_placed();
  l.on_workers_started();
  CHECK_FALSE(l.awaits_reform());
  CHECK(l.on_reform_in_place());
  CHECK(l.awaits_reform());
  CHECK(l.ending() == AgentLifecycle::Ending::kInPlace);
  CHECK(l.on_reform_assignment());  // the workers are there to take it up
  CHECK_FALSE(l.awaits_reform());
  l.on_reformed();
  CHECK(l.stage() == Stage::kRunning);
  CHECK(l.on_reform_in_place());
  CHECK(l.on_processes_gone());  // a worker died while the round formed
  CHECK(l.awaits_reform());      // its assignment still comes here, to report the loss in the new round
  CHECK_FALSE(l.on_reform_assignment());
  CHECK_FALSE(l.awaits_reform());
}

TEST_CASE("dropped from an elastic job: the round ends as a restart, then the node joins again") {
  AgentLifecycle l;
  l.on_placed();
  l.on_workers_started();
  l.on_dropped();
  CHECK(l.restarting());
  CHECK(l.ending() == AgentLifecycle::Ending::kRejoin);
  CHECK(l.on_processes_gone());
  CHECK(l.after_drained() == Next::kRejoin);
  CHECK(l.ending() == AgentLifecycle::Ending::kOpen);  // once
  l.on_next_round();
  CHECK(l.stage() == Stage::kAwaitingRound);
  SUBCASE("the job's end replaces a rejoin under way") {
    AgentLifecycle m;
    m.on_placed();
    m.on_workers_started();
    m.on_dropped();
    m.on_job_over();
    CHECK(m.on_processes_gone());
    CHECK(m.after_drained() == Next::kFinish);
  }
  SUBCASE("nothing after the end") {
    AgentLifecycle m;
    m.on_job_over();
    m.on_dropped();
    CHECK(m.ending() == AgentLifecycle::Ending::kJobOver);
  }
}

TEST_CASE("workers that did not take a re-formed round up start again in it; a restart order replaces that") {
  AgentLifecycle l;
  l.on_placed();
  l.on_workers_started();
  CHECK(l.on_reform_in_place());
  CHECK(l.on_reform_assignment());
  l.on_reformed();
  l.on_reform_not_taken();
  CHECK(l.ending() == AgentLifecycle::Ending::kRestartInRound);
  CHECK(l.restarting());
  SUBCASE("drained: new workers in the same round") {
    CHECK(l.on_processes_gone());
    CHECK(l.after_drained() == Next::kRestartInRound);
  }
  SUBCASE("the rendezvous orders a restart meanwhile: the usual next round") {
    l.on_restart_ordered();
    CHECK(l.on_processes_gone());
    CHECK(l.after_drained() == Next::kBeginNextRound);
  }
}

TEST_CASE("illegal transitions are refused: nothing changes") {
  AgentLifecycle l;
  l.on_reform_not_taken();  // no running round
  CHECK(l.ending() == AgentLifecycle::Ending::kOpen);
  l.on_placed();
  l.on_workers_started();
  l.on_restart_ordered();
  l.on_reform_not_taken();  // a restart is under way
  CHECK(l.ending() == AgentLifecycle::Ending::kRestart);
  CHECK_FALSE(l.on_reform_in_place());
  CHECK_FALSE(l.awaits_reform());
  CHECK_FALSE(l.on_reform_assignment());
}

TEST_CASE("the live view's word for each stage (issue 32: a re-forming node says restarting, not running)") {
  AgentLifecycle l;
  CHECK(std::string(l.state_word(false)) == "rendezvous");
  l.on_placed();
  CHECK(std::string(l.state_word(false)) == "restarting");  // placed once: waiting for the next round
  l.on_workers_started();
  CHECK(std::string(l.state_word(false)) == "running");
  CHECK(std::string(l.state_word(true)) == "stopping");
  REQUIRE(l.on_reform_in_place());
  CHECK(std::string(l.state_word(false)) == "restarting");
  CHECK(std::string(l.state_word(true)) == "stopping");
  l.on_reform_assignment();
  l.on_reformed();
  l.on_restart_ordered();
  l.on_processes_gone();
  CHECK(std::string(l.state_word(false)) == "restarting");  // the round is over, the next one comes
  l.on_job_over();
  CHECK(std::string(l.state_word(false)) == "stopping");
  CHECK(l.after_drained() == Next::kFinish);
  CHECK(std::string(l.state_word(false)) == "done");
}
