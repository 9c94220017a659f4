// The local heartbeat channel: one shared-memory page (a memfd) with a 64-byte slot per local rank. A
// worker beats by storing two 64-bit numbers in its slot — no system call, no message, no wake-up of the
// agent — and the agent reads every slot when its one hang timer fires (agent/hang_watch.hpp decides).
//
// Each worker inherits the memfd and finds its slot through two variables (README "Hang detection"):
//   DDPRUN_HEARTBEAT_FD      the descriptor to mmap (MAP_SHARED, read-write)
//   DDPRUN_HEARTBEAT_OFFSET  the byte offset of its slot (64 * LOCAL_RANK)
// Slot layout (common/contract/worker_contract.hpp, the one definition), native-endian, 8-byte aligned:
//   +0  int64 step      the training step of the last beat (-1: none given)
//   +8  int64 time_ns   CLOCK_MONOTONIC in nanoseconds at the last beat; 0: never beat. Written last.
//   +16 int64 quiet_until_ns, +24 int64 work_ns (see the contract)
// Why shared memory and not a socket: docs/DESIGN-NOTES.md "Hang detection".
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/contract/worker_contract.hpp"

namespace ddprun::agent {

using contract::kHeartbeatSlotBytes;

struct Beat {
  std::int64_t step = -1;
  std::int64_t time_ns = 0;  // CLOCK_MONOTONIC; 0: never beat
  std::int64_t quiet_until_ns = 0;  // a declared quiet phase ends then (CLOCK_MONOTONIC); 0: none
  std::int64_t work_ns = 0;         // the worker's own work so far (not waiting for other ranks); 0: not said
  // The slot's time was not CLOCK_MONOTONIC's (in the future, or negative: a worker beating with CLOCK_REALTIME):
  // read as never beat, so that it is not "alive" forever, and said once (take_foreign_clock_notice).
  bool foreign_clock = false;
  bool ever() const { return time_ns != 0; }
};

// CLOCK_MONOTONIC now, in nanoseconds: the clock workers write (Python's time.monotonic_ns()).
std::int64_t monotonic_ns();

class HeartbeatChannel {
 public:
  HeartbeatChannel() = default;
  // Creates the shared page for `slots` local ranks. Throws ddprun::SystemError.
  explicit HeartbeatChannel(int slots);
  ~HeartbeatChannel();
  HeartbeatChannel(HeartbeatChannel&& other) noexcept;
  HeartbeatChannel& operator=(HeartbeatChannel&& other) noexcept;
  HeartbeatChannel(const HeartbeatChannel&) = delete;
  HeartbeatChannel& operator=(const HeartbeatChannel&) = delete;

  bool enabled() const { return fd_ >= 0; }
  int fd() const { return fd_; }  // close-on-exec here; spawn's inherit_fds hands it to each worker
  static std::size_t offset_of(int local_rank) { return kHeartbeatSlotBytes * static_cast<std::size_t>(local_rank); }
  int slots() const { return slots_; }

  // Every slot back to "never beat": a new round's workers start from nothing.
  void clear();
  // What the worker wrote, within bounds (issue 33: the worker's values reached the status code's arithmetic
  // and the rendezvous unchecked): a time from another clock reads as none, a step below -1 as -1, a negative
  // work counter as 0, a quiet phase at most kMaxQuietNs from now.
  Beat read(int local_rank) const;
  static constexpr std::int64_t kMaxQuietNs = 30LL * 24 * 3600 * 1'000'000'000;  // 30 days
  // For a beat read with foreign_clock: true the first time for that slot since clear(), so it is said once.
  bool take_foreign_clock_notice(int local_rank);
  // Re-forming in place (common/contract/worker_contract.hpp): what the worker took up (0: it offers none;
  // 1 + the re-forms taken up), and the agent's announcement of the n-th.
  std::int64_t reforms_taken(int local_rank) const;
  void announce_reform(int local_rank, std::int64_t n);
  // The group of the round before re-form n lost a node: the worker leaves it without waiting for a step boundary.
  void announce_group_lost(int local_rank, std::int64_t n);
  // The worker is past its imports and can meet its peers (+56), or has beaten already.
  bool ready_to_meet(int local_rank) const;
  // One slot back to "never beat" (step and time only): a worker re-formed in place starts its round afresh.
  void forget_beats(int local_rank) { write(base_ + offset_of(local_rank), -1, 0); }
  // What a worker does; the agent's tests and benchmarks use it to beat from C++.
  static void write(void* slot, std::int64_t step, std::int64_t time_ns);
  // What a worker does to open (until_ns > 0) or close (0) a quiet phase; the beat that follows publishes it.
  static void write_quiet(void* slot, std::int64_t until_ns);
  // What a worker does to add its own work to the slot; the beat that follows publishes it.
  static void add_work(void* slot, std::int64_t work_ns);

 private:
  void release();

  int fd_ = -1;
  int slots_ = 0;
  std::vector<bool> foreign_said_;  // by slot: take_foreign_clock_notice said it
  std::size_t bytes_ = 0;
  unsigned char* base_ = nullptr;
};

}  // namespace ddprun::agent
