// Heartbeats for ddprun's hang detection (`ddprun --hang-timeout SEC`, README "Hang detection").
//
// The SDK beats by itself after every collective (ProcessGroup) and every DDP backward; call heartbeat(step)
// once per training step to add the step number to the root cause when a rank hangs. Both are a store into
// the shared page ddprun hands each worker (DDPRUN_HEARTBEAT_FD/_OFFSET): no system call, no lock, safe
// from any thread; outside ddprun they do nothing. ddprun reads the beats for its live view and straggler
// naming; only --hang-timeout judges a silent rank.
//
// The SDK also tells ddprun how much of each step was this rank's own work rather than waiting for the other
// ranks (PeerWait below): in lockstep training every rank's step takes as long as the slowest's, so only this
// tells ddprun which rank is slow (docs/MONITORING.md "Stragglers").
#pragma once

#include <chrono>
#include <cstdint>

namespace ddprun::sdk {

// Alive, at training step `step` (>= 0).
void heartbeat(std::int64_t step);
// Alive; the last step given stays as it was.
void heartbeat();

// At exit (main returned, or exit()), a rank declares a quiet phase of this bound by itself: the static
// destructors, a process group's teardown and a sanitizer's leak check run with no beat, and a rank that
// finished is not hung; one whose exit deadlocks is judged once the bound runs out.
inline constexpr std::chrono::seconds kExitQuiet{30};

// A phase that is silent on purpose (an evaluation pass, a checkpoint save, loading a data set): while the
// object lives, and for at most `at_most` from its construction, the rank is not hung however long since its
// last beat; past `at_most` it is (a save that hangs is still caught). Its end beats. Phases nest: the inner
// one's end restores the outer one's bound. The SDK's own evaluation-free paths use it (Checkpointer::save,
// maybe_resume); a program wraps its own long quiet phases. The ranks that wait for this one meanwhile (in a
// barrier, in the next collective) are not hung either: ddprun's job-wide verdict sees the phase and leaves
// every silent rank alone until it ends or its bound runs out. A rank that is quiet while itself waiting in a
// collective covers nobody: it waits like the others.
class QuietPhase {
 public:
  explicit QuietPhase(std::chrono::milliseconds at_most);
  ~QuietPhase();
  QuietPhase(const QuietPhase&) = delete;
  QuietPhase& operator=(const QuietPhase&) = delete;

 private:
  std::int64_t previous_until_ns_ = 0;
};

// Waiting for the other ranks: a blocking collective, DDP's wait for its gradient buckets. The time between
// the end of one wait and the start of the next is this rank's own work (forward, backward, optimizer, data),
// added to its heartbeat slot; time in quiet phases is left out (a checkpoint only rank 0 writes would make it
// look slow). The SDK's collectives use it; a program that waits on its own collectives may too.
class PeerWait {
 public:
  PeerWait();
  ~PeerWait();
  PeerWait(const PeerWait&) = delete;
  PeerWait& operator=(const PeerWait&) = delete;
};

}  // namespace ddprun::sdk
