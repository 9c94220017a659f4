// A steady clock that leaves out the time this process was not running: stopped (Ctrl-Z, SIGSTOP, a
// debugger), frozen (a VM migrated, a cgroup frozen) or starved. Liveness judgements use it, so a node
// that wakes up judges its peers by the time it could have heard them, not by how long it slept: a
// heartbeat deadline that passed while we were stopped is pushed back by the stop, the waiting sockets
// are read, and only a peer that stays silent after that is lost.
//
// Stops are seen by the timers that judge (the rendezvous client's heartbeat, the server's tick): each
// tells `note_late` when it was due and when it ran; lateness above kStallThreshold is a stall and is
// added, once however many timers see the same one.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/timeouts.hpp"

namespace ddprun {

class StallClock {
 public:
  using Clock = std::chrono::steady_clock;
  // A timer this late means the process did not run (a loaded loop's jitter stays far below).
  static constexpr std::chrono::milliseconds kStallThreshold = timeouts::kStallThreshold;

  static Clock::time_point now() { return Clock::now() - std::chrono::nanoseconds(stalled_ns().load()); }

  // A timer due at `due` ran at `ran` (both steady_clock). Returns the stall credited now (zero if none).
  static std::chrono::nanoseconds note_late(Clock::time_point due, Clock::time_point ran) {
    const std::int64_t due_ns = due.time_since_epoch().count();
    const std::int64_t ran_ns = ran.time_since_epoch().count();
    // Only the part of [due, ran) not credited before: two timers late for the same stop count it once.
    std::int64_t from = std::max(due_ns, credited_until_ns().load());
    const std::int64_t late = ran_ns - from;
    if (ran_ns - due_ns <= std::chrono::nanoseconds(kStallThreshold).count() || late <= 0)
      return std::chrono::nanoseconds(0);
    credited_until_ns().store(ran_ns);
    stalled_ns().fetch_add(late);
    return std::chrono::nanoseconds(late);
  }

  // All the time left out so far.
  static std::chrono::nanoseconds total() { return std::chrono::nanoseconds(stalled_ns().load()); }

 private:
  static std::atomic<std::int64_t>& stalled_ns() {
    static std::atomic<std::int64_t> v{0};
    return v;
  }
  static std::atomic<std::int64_t>& credited_until_ns() {
    static std::atomic<std::int64_t> v{0};
    return v;
  }
};

}  // namespace ddprun
