#include "worker_sdk/heartbeat.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <ctime>

#include "common/contract/worker_contract.hpp"

namespace ddprun::sdk {
namespace {
// The worker's slot (common/contract/worker_contract.hpp): int64 step, then int64 CLOCK_MONOTONIC nanoseconds,
// written last. Mapped once,
// on the first beat (a function-local static: thread-safe), never unmapped: a beat may come from any
// thread until the process ends.
void declare_exit_quiet();

std::int64_t* slot() {
  static std::int64_t* const mapped = []() -> std::int64_t* {
    const char* fd = std::getenv(contract::kHeartbeatFd);
    const char* off = std::getenv(contract::kHeartbeatOffset);
    if (!fd || !off) return nullptr;
    const long offset = std::atol(off);
    const long page = ::sysconf(_SC_PAGESIZE);
    if (offset < 0 || page <= 0) return nullptr;
    void* p = ::mmap(nullptr, static_cast<std::size_t>(page), PROT_READ | PROT_WRITE, MAP_SHARED, std::atoi(fd),
                     static_cast<off_t>(offset / page * page));
    if (p == MAP_FAILED) return nullptr;  // not ddprun's descriptor after all: beating is best effort
    std::atexit(declare_exit_quiet);
    return reinterpret_cast<std::int64_t*>(static_cast<char*>(p) + offset % page);
  }();
  return mapped;
}

std::int64_t now_ns() {  // CLOCK_MONOTONIC, the clock ddprun reads beats and quiet phases with
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The end of the last wait for other ranks (or quiet phase): this rank's own work counts from then; 0: none yet
// (what comes before the first collective, loading, is not a step's work).
std::atomic<std::int64_t> work_from_ns{0};

// Adds the work since work_from_ns to the slot (published by the next beat) and stops counting.
void settle_work(std::int64_t* s, std::int64_t now) {
  const std::int64_t from = work_from_ns.exchange(0);
  if (from > 0 && now > from) __atomic_fetch_add(&s[contract::kBeatWorkOffset / 8], now - from, __ATOMIC_RELAXED);
}

void store_time(std::int64_t* s) { __atomic_store_n(&s[contract::kBeatTimeOffset / 8], now_ns(), __ATOMIC_RELEASE); }

// Opens a quiet phase of at most `at_most` from now (never shortening one already open) and beats, which
// publishes the bound; returns the bound it replaced, for the phase's end to restore.
std::int64_t open_quiet_phase(std::int64_t* s, std::chrono::nanoseconds at_most) {
  std::int64_t* until = &s[contract::kBeatQuietUntilOffset / 8];
  const std::int64_t previous = __atomic_load_n(until, __ATOMIC_RELAXED);
  const std::int64_t now = now_ns();
  settle_work(s, now);
  __atomic_store_n(until, std::max(now + at_most.count(), previous), __ATOMIC_RELAXED);
  store_time(s);  // the release store publishes the bound with the beat
  return previous;
}

// Registered with the slot's mapping, so it runs at exit (after main returns or exit()), before the static
// destructors (LibTorch's, a process group's teardown) and a sanitizer's leak check, which may take seconds with
// no beat: a rank that finished is not hung. The phase is bounded (kExitQuiet): an exit that deadlocks (a
// communicator's teardown waiting for a peer) is still judged once it runs out.
void declare_exit_quiet() {
  if (std::int64_t* s = slot()) open_quiet_phase(s, kExitQuiet);
}
}  // namespace

void heartbeat(std::int64_t step) {
  std::int64_t* s = slot();
  if (!s) return;
  __atomic_store_n(&s[contract::kBeatStepOffset / 8], step, __ATOMIC_RELAXED);
  store_time(s);
}

void heartbeat() {
  if (std::int64_t* s = slot()) store_time(s);
}

QuietPhase::QuietPhase(std::chrono::milliseconds at_most) {
  if (std::int64_t* s = slot()) previous_until_ns_ = open_quiet_phase(s, at_most);
}

QuietPhase::~QuietPhase() {
  std::int64_t* s = slot();
  if (!s) return;
  __atomic_store_n(&s[contract::kBeatQuietUntilOffset / 8], previous_until_ns_, __ATOMIC_RELAXED);
  work_from_ns.store(now_ns());
  store_time(s);
}

PeerWait::PeerWait() {
  if (std::int64_t* s = slot()) settle_work(s, now_ns());
}

PeerWait::~PeerWait() {
  if (slot()) work_from_ns.store(now_ns());
}

}  // namespace ddprun::sdk
