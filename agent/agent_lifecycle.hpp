// Where a node's agent is in its job, as one value: which round stage it is in, what the rendezvous said the
// round leads to, and how far the clean-up of leftovers has gone. Pure (no I/O, no clock): NodeAgent reports
// each event here and does what the answer says, so every transition is in this file and tested on its own
// (tests/agent/agent_lifecycle_test.cpp), like SupervisionPolicy's for the workers.
//
//   kAwaitingRound --assignment--> kRunning --every process gone--> kRoundOver --drained, restart--> kAwaitingRound
//         |                                                              \--drained, job over--> kFinished
//         \--restart or job end before any worker ran--> kNothingRan --drained--> (as kRoundOver)
//
//   kRunning --membership re-form, workers offer it--> kReforming --assignment--> kRunning (the same workers)
//   A re-form in place keeps the round's workers into the next round (agent/in_place_reform.hpp): the node
//   reports itself stopped at once. Anything else while it waits (a restart, the job's end, a worker's death)
//   goes as from kRunning.
//
//   Dropped from an elastic job that goes on (StopOrder::rejoin, node_agent_rdzv.cpp): the round ends as for a
//   restart (kRejoin); once drained (Next::kRejoin) the agent joins again with a fresh client instead of
//   report_stopped, and the next assignment (new ranks) leads to kRunning as usual.
//   Workers that did not take a re-formed round up (without --hang-timeout): kRestartInRound; once drained
//   (Next::kRestartInRound) new workers start in the round the rendezvous already formed, without asking it.
//
// What the round leads to is one value, Ending (issue 31: it had regrown as three flags beside this class,
// reform_pending_, restart_into_round_ and rejoin_pending_, which could contradict it and each other).
//
// The ending (what the rendezvous said) is independent of the stage: a job can be known to be over while its
// workers are still being torn down, and a restart can be ordered before this node was placed at all.
#pragma once

namespace ddprun::agent {

class AgentLifecycle {
 public:
  enum class Stage {
    kAwaitingRound,  // no worker of this node runs: before the first assignment, or between restart rounds
    kRunning,        // this round's workers were started and some process of the round lives
    kReforming,      // the round's workers stay for the next round (a re-form in place): its assignment awaited
    kRoundOver,      // every process of the round is gone; its output may still be draining
    kNothingRan,     // the round ended (restart ordered, job over) before this node started anything
    kFinished,       // the job is over here: every process gone, every stream drained; the loop stops
  };
  enum class Ending {
    kOpen,            // nothing said yet
    kInPlace,         // a re-form in place: the next assignment goes to this round's workers
    kRestart,         // the rendezvous re-forms the job: this round's processes go, then the next assignment
    kRestartInRound,  // this node's workers did not take a re-formed round up: new ones start in that round
    kRejoin,          // dropped from an elastic job that goes on: once the workers are gone, join it again
    kJobOver,         // the rendezvous said how the job ended (or this node lost it): always final
  };
  // Clean-up of a round's processes after a teardown began or its workers all exited, leaving descendants.
  enum class Cleanup {
    kNone,
    kGracePeriod,  // the teardown's signal (or, after success, one SIGTERM to leftovers) went out; timer runs
    kKilling,      // the grace period is over: SIGKILL to anything left, until nothing is
  };
  // What to do once every process is gone and every stream drained (after_drained).
  enum class Next { kWait, kBeginNextRound, kRestartInRound, kRejoin, kFinish };

  Stage stage() const { return stage_; }
  Ending ending() const { return ending_; }
  Cleanup cleanup() const { return cleanup_; }

  bool placed_once() const { return placed_once_; }  // the server put this node in a round: it waits for it
  bool workers_started() const {
    return stage_ == Stage::kRunning || stage_ == Stage::kReforming || stage_ == Stage::kRoundOver;
  }
  bool reforming() const { return stage_ == Stage::kReforming; }
  bool processes_gone() const {
    return stage_ == Stage::kRoundOver || stage_ == Stage::kNothingRan || stage_ == Stage::kFinished;
  }
  bool restarting() const {
    return ending_ == Ending::kRestart || ending_ == Ending::kRestartInRound || ending_ == Ending::kRejoin;
  }
  // A re-form in place was accepted and its assignment has not come: it goes to the running workers.
  bool awaits_reform() const { return ending_ == Ending::kInPlace; }
  bool outcome_known() const { return ending_ == Ending::kJobOver; }
  bool finished() const { return stage_ == Stage::kFinished; }
  // The agent's word in the live view (rendezvous, running, restarting, stopping, done), with whether the
  // policy has begun stopping this round's workers.
  const char* state_word(bool workers_stopping) const;

  // The rendezvous placed this node in a round (whether or not it starts workers: a signal may have come).
  void on_placed() { placed_once_ = true; }
  // This round's workers are being started.
  void on_workers_started();
  // The rendezvous ordered a restart / said the job is over. Before any worker ran, nothing is left to go. A
  // restart replaces a re-form in place under way; the end replaces any restart.
  void on_restart_ordered();
  void on_job_over();
  // Dropped from an elastic job that goes on: a restart whose next round is joined anew (Next::kRejoin).
  void on_dropped();
  // The workers did not take a re-formed round up: a restart of this node's workers alone, in that round.
  void on_reform_not_taken();
  // A membership re-form that keeps this round's workers (false: not while running an open round).
  bool on_reform_in_place();
  // The re-form's assignment came (awaits_reform): true when the workers are still there to take it up
  // (false: one ended meanwhile, the round is over and its failure goes the usual way).
  bool on_reform_assignment();
  // Its assignment was handed to the workers: they run the new round.
  void on_reformed();
  // Every process of the round is gone (workers and descendants reaped). False if that was already known.
  bool on_processes_gone();
  // Every stream of the round drained (or, for a restart, waits for the console beside the next round).
  Next after_drained();
  // The previous round is cleaned up and the next assignment is awaited.
  void on_next_round();

  // A grace period starts (false: one is already running or over, nothing to arm).
  bool arm_grace();
  void on_grace_expired() { cleanup_ = Cleanup::kKilling; }

 private:
  Stage stage_ = Stage::kAwaitingRound;
  Ending ending_ = Ending::kOpen;
  Cleanup cleanup_ = Cleanup::kNone;
  bool placed_once_ = false;  // once true, for good: it is a fact about the job, not about a round
};

const char* to_string(AgentLifecycle::Stage stage);

}  // namespace ddprun::agent
