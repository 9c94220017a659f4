#include "agent/heartbeat_channel.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "common/error.hpp"

namespace ddprun::agent {

std::int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

HeartbeatChannel::HeartbeatChannel(int slots) : slots_(slots) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  bytes_ = (offset_of(slots) + page - 1) / page * page;
  if (bytes_ == 0) bytes_ = page;
  // A memfd, not a file: nothing on disk to clean up or to write back, and it dies with its last holder.
  fd_ = ::memfd_create("ddprun-heartbeat", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) throw SystemError("cannot create the heartbeat channel (memfd_create)", errno);
  if (::ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) {
    const int err = errno;
    release();
    throw SystemError("cannot size the heartbeat channel", err);
  }
  // Sealed against shrinking (issue 33): a worker that truncated the memfd (os.ftruncate on its descriptor,
  // or the path /proc/self/fd/N opened with "w") made the agent's next read of the page a SIGBUS, which
  // killed ddprun with no summary. Now the truncation fails in the worker (EPERM) and the page stays whole.
  if (::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    const int err = errno;
    release();
    throw SystemError("cannot seal the heartbeat channel", err);
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    release();
    throw SystemError("cannot map the heartbeat channel", err);
  }
  base_ = static_cast<unsigned char*>(p);
  clear();
}

HeartbeatChannel::~HeartbeatChannel() { release(); }

HeartbeatChannel::HeartbeatChannel(HeartbeatChannel&& other) noexcept { *this = std::move(other); }

HeartbeatChannel& HeartbeatChannel::operator=(HeartbeatChannel&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    slots_ = std::exchange(other.slots_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    base_ = std::exchange(other.base_, nullptr);
    foreign_said_ = std::move(other.foreign_said_);
  }
  return *this;
}

void HeartbeatChannel::release() {
  if (base_) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

void HeartbeatChannel::clear() {
  foreign_said_.assign(static_cast<std::size_t>(slots_), false);
  for (int lr = 0; lr < slots_; ++lr) {
    write_quiet(base_ + offset_of(lr), 0);
    for (std::size_t at : {contract::kBeatWorkOffset, contract::kBeatReformsAnnouncedOffset,
                           contract::kBeatReformsTakenOffset, contract::kBeatGroupLostOffset})
      __atomic_store_n(reinterpret_cast<std::int64_t*>(base_ + offset_of(lr) + at), 0, __ATOMIC_RELAXED);
    write(base_ + offset_of(lr), -1, 0);
  }
}

Beat HeartbeatChannel::read(int local_rank) const {
  unsigned char* slot = base_ + offset_of(local_rank);
  Beat b;
  // The time first (acquire pairs with the writer's release): a step read after it is at least as new.
  b.time_ns = __atomic_load_n(reinterpret_cast<std::int64_t*>(slot + contract::kBeatTimeOffset), __ATOMIC_ACQUIRE);
  b.step = __atomic_load_n(reinterpret_cast<std::int64_t*>(slot + contract::kBeatStepOffset), __ATOMIC_RELAXED);
  b.quiet_until_ns =
      __atomic_load_n(reinterpret_cast<std::int64_t*>(slot + contract::kBeatQuietUntilOffset), __ATOMIC_RELAXED);
  b.work_ns = __atomic_load_n(reinterpret_cast<std::int64_t*>(slot + contract::kBeatWorkOffset), __ATOMIC_RELAXED);
  // A beat is at most a second ahead of this read (the worker may write between our clock read and the load).
  const std::int64_t now = monotonic_ns();
  if (b.time_ns < 0 || b.time_ns > now + 1'000'000'000) {
    b.foreign_clock = true;
    b.time_ns = 0;
  }
  if (b.time_ns == 0 || b.step < -1) b.step = -1;
  b.quiet_until_ns = std::clamp<std::int64_t>(b.quiet_until_ns, 0, now + kMaxQuietNs);
  b.work_ns = std::max<std::int64_t>(b.work_ns, 0);
  return b;
}

bool HeartbeatChannel::take_foreign_clock_notice(int local_rank) {
  if (local_rank < 0 || local_rank >= slots_ || foreign_said_[static_cast<std::size_t>(local_rank)]) return false;
  foreign_said_[static_cast<std::size_t>(local_rank)] = true;  // sized by clear(), which the constructor runs
  return true;
}

std::int64_t HeartbeatChannel::reforms_taken(int local_rank) const {
  return __atomic_load_n(reinterpret_cast<std::int64_t*>(base_ + offset_of(local_rank) + contract::kBeatReformsTakenOffset),
                         __ATOMIC_ACQUIRE);
}

void HeartbeatChannel::announce_reform(int local_rank, std::int64_t n) {
  __atomic_store_n(reinterpret_cast<std::int64_t*>(base_ + offset_of(local_rank) + contract::kBeatReformsAnnouncedOffset),
                   n, __ATOMIC_RELEASE);
}

bool HeartbeatChannel::ready_to_meet(int local_rank) const {
  const unsigned char* slot = base_ + offset_of(local_rank);
  return __atomic_load_n(reinterpret_cast<const std::int64_t*>(slot + contract::kBeatReadyToMeetOffset),
                         __ATOMIC_ACQUIRE) != 0 ||
         __atomic_load_n(reinterpret_cast<const std::int64_t*>(slot + contract::kBeatTimeOffset), __ATOMIC_ACQUIRE) != 0;
}

void HeartbeatChannel::announce_group_lost(int local_rank, std::int64_t n) {
  __atomic_store_n(reinterpret_cast<std::int64_t*>(base_ + offset_of(local_rank) + contract::kBeatGroupLostOffset), n,
                   __ATOMIC_RELEASE);
}

void HeartbeatChannel::add_work(void* slot, std::int64_t work_ns) {
  auto* bytes = static_cast<unsigned char*>(slot);
  __atomic_fetch_add(reinterpret_cast<std::int64_t*>(bytes + contract::kBeatWorkOffset), work_ns, __ATOMIC_RELAXED);
}

void HeartbeatChannel::write_quiet(void* slot, std::int64_t until_ns) {
  auto* bytes = static_cast<unsigned char*>(slot);
  __atomic_store_n(reinterpret_cast<std::int64_t*>(bytes + contract::kBeatQuietUntilOffset), until_ns, __ATOMIC_RELAXED);
}

void HeartbeatChannel::write(void* slot, std::int64_t step, std::int64_t time_ns) {
  auto* bytes = static_cast<unsigned char*>(slot);
  __atomic_store_n(reinterpret_cast<std::int64_t*>(bytes + contract::kBeatStepOffset), step, __ATOMIC_RELAXED);
  __atomic_store_n(reinterpret_cast<std::int64_t*>(bytes + contract::kBeatTimeOffset), time_ns, __ATOMIC_RELEASE);
}

}  // namespace ddprun::agent
