// Heartbeats for ddprun's hang detection (`ddprun --hang-timeout SEC`, README "Hang detection").
//
// The SDK beats by itself after every collective (ProcessGroup) and every DDP backward; call heartbeat(step)
// once per training step to add the step number to the root cause when a rank hangs. Both are a store into
// the shared page ddprun hands each worker (DDPRUN_HEARTBEAT_FD/_OFFSET): no system call, no lock, safe
// from any thread; outside ddprun, or without --hang-timeout, they do nothing.
#pragma once

#include <chrono>
#include <cstdint>

namespace ddprun::sdk {

// Alive, at training step `step` (>= 0).
void heartbeat(std::int64_t step);
// Alive; the last step given stays as it was.
void heartbeat();

// A phase that is silent on purpose (an evaluation pass, a checkpoint save, loading a data set): while the
// object lives, and for at most `at_most` from its construction, the rank is not hung however long since its
// last beat; past `at_most` it is (a save that hangs is still caught). Its end beats. Phases nest: the inner
// one's end restores the outer one's bound. The SDK's own evaluation-free paths use it (Checkpointer::save,
// maybe_resume); a program wraps its own long quiet phases.
class QuietPhase {
 public:
  explicit QuietPhase(std::chrono::milliseconds at_most);
  ~QuietPhase();
  QuietPhase(const QuietPhase&) = delete;
  QuietPhase& operator=(const QuietPhase&) = delete;

 private:
  std::int64_t previous_until_ns_ = 0;
};

}  // namespace ddprun::sdk
