#include "common/write_queue.hpp"

#include "common/background_thread.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <thread>

#include "common/log.hpp"

namespace ddprun {
namespace {
// One writev(2) takes what is queued up to these bounds: fewer system calls for a chatty job, whole pieces.
constexpr std::size_t kMaxBatch = 1 << 20;
constexpr std::size_t kMaxPieces = 64;

// Buffers written and kept for the next Buffer::take: enough for the loop's reads and the pieces in flight
// between it and the writer threads; small or huge ones are not kept. Process-wide and never destroyed (a
// writer thread may outlive main's return).
constexpr std::size_t kPoolBuffers = 8;
constexpr std::size_t kPoolMinCapacity = 64 * 1024;
constexpr std::size_t kPoolMaxCapacity = 4 << 20;
struct Pool {
  std::mutex mu;
  std::vector<Buffer> spare;
};
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

// Writes every piece fully, in order, as few writev(2) calls as it takes; the same contract as write_fully
// (common/log.hpp): 0 or the errno that stopped it, `written` grows by what went out.
int writev_fully(int fd, const std::vector<Buffer>& pieces, std::uint64_t& written) {
  iovec iov[kMaxPieces];
  std::size_t first = 0;  // the first piece not fully written, and how much of it went out
  std::size_t done = 0;
  while (first < pieces.size()) {
    int count = 0;
    for (std::size_t i = first; i < pieces.size() && count < static_cast<int>(kMaxPieces); ++i, ++count) {
      const std::size_t skip = i == first ? done : 0;
      iov[count] = {const_cast<char*>(pieces[i].data()) + skip, pieces[i].size() - skip};
    }
    const ssize_t n = ::writev(fd, iov, count);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // someone left the fd non-blocking
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;
    written += static_cast<std::uint64_t>(n);
    std::size_t left = static_cast<std::size_t>(n);
    while (left > 0) {
      const std::size_t rest = pieces[first].size() - done;
      if (left < rest) {
        done += left;
        break;
      }
      left -= rest;
      ++first;
      done = 0;
    }
    while (first < pieces.size() && pieces[first].size() == done) {  // empty pieces
      ++first;
      done = 0;
    }
  }
  return 0;
}

// What was not written of `pieces` after `written` bytes went out (counted lost when a write broke).
void count_unwritten(const std::vector<Buffer>& pieces, std::uint64_t written, WriteQueueStats& stats) {
  for (const Buffer& piece : pieces) {
    const std::size_t skip = static_cast<std::size_t>(std::min<std::uint64_t>(written, piece.size()));
    written -= skip;
    const std::string_view rest = piece.view().substr(skip);
    stats.lost_bytes += rest.size();
    if (!rest.empty()) stats.lost_lines += count_lines(rest);
  }
}
}  // namespace

void Buffer::grow(std::size_t n) {
  std::unique_ptr<char[]> bigger(new char[n]);  // not value-initialised: no zero-fill
  if (size_ != 0) std::memcpy(bigger.get(), data_.get(), size_);
  data_ = std::move(bigger);
  cap_ = n;
}

Buffer Buffer::take(std::size_t capacity) {
  Buffer b;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.spare.empty()) {
      b = std::move(p.spare.back());
      p.spare.pop_back();
    }
  }
  b.clear();
  b.reserve(capacity);
  return b;
}

void Buffer::recycle(Buffer&& b) {
  if (b.capacity() < kPoolMinCapacity || b.capacity() > kPoolMaxCapacity) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.spare.size() < kPoolBuffers) p.spare.push_back(std::move(b));
}

std::uint64_t count_lines(std::string_view s) {
  return static_cast<std::uint64_t>(std::count(s.begin(), s.end(), '\n')) + (s.empty() || s.back() == '\n' ? 0 : 1);
}

std::shared_ptr<WriteQueue> WriteQueue::create(int fd, Options options) {
  return std::shared_ptr<WriteQueue>(new WriteQueue(fd, std::move(options)));
}

std::shared_ptr<WriteQueue> WriteQueue::create_file(std::string path, Options options) {
  options.owns_fd = true;
  auto queue = create(-1, std::move(options));
  queue->path_ = std::move(path);
  return queue;
}

// In the writer thread, its directories first. O_NONBLOCK: a FIFO planted at the path without a reader fails
// (ENXIO) instead of holding the thread; the flag is then cleared, so a full pipe or a slow disk is waited on
// as usual.
bool WriteQueue::open_file() {
  {
    std::lock_guard<std::mutex> lock(mu_);  // a create that hangs counts as a write that hangs (stalled())
    writing_ = true;
    write_started_ = std::chrono::steady_clock::now();
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);  // ENOSPC etc.: open says
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  const int err = errno;
  if (fd >= 0) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::lock_guard<std::mutex> lock(mu_);
    fd_ = fd;
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.broken_errno = err;
    stats_.never_opened = true;
    drop_queue_locked();
  }
  if (options_.on_break) options_.on_break(err, 0, false);
  return false;
}

void WriteQueue::start() {
  // The thread holds the queue until it is finished and written: a producer may drop it at any time.
  start_background_thread("a log writer", [self = shared_from_this()] { self->loop(); });
}

void WriteQueue::write(std::string_view data) { write(Buffer(data)); }

void WriteQueue::write(Buffer&& data) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stats_.broken_errno != 0 || stats_.abandoned || finishing_) {
      stats_.lost_bytes += data.size();
      stats_.lost_lines += count_lines(data.view());
      return;
    }
    stats_.queued_bytes += data.size();
    queue_.push_back(std::move(data));
    if (stats_.queued_bytes > options_.high_water) congested_ = true;
  }
  cv_.notify_one();
}

void WriteQueue::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finishing_ = true;
  }
  cv_.notify_one();
}

bool WriteQueue::congested() {
  std::lock_guard<std::mutex> lock(mu_);
  return congested_;
}

bool WriteQueue::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && (!writing_ || stats_.abandoned);
}

void WriteQueue::abandon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.abandoned = true;
    drop_queue_locked();
  }
  cv_.notify_one();
}

bool WriteQueue::stalled() {
  std::lock_guard<std::mutex> lock(mu_);
  return congested_ || (writing_ && std::chrono::steady_clock::now() - write_started_ > std::chrono::milliseconds(100));
}

WriteQueueStats WriteQueue::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void WriteQueue::set_on_room(std::function<void()> on_room) {
  std::lock_guard<std::mutex> lock(room_mu_);
  on_room_ = std::move(on_room);
}

void WriteQueue::drop_queue_locked() {
  for (const Buffer& piece : queue_) {
    stats_.lost_bytes += piece.size();
    stats_.lost_lines += count_lines(piece.view());
  }
  queue_.clear();
  stats_.queued_bytes = 0;
}

void WriteQueue::loop() {
  std::vector<Buffer> batch;
  const bool opened = fd_ >= 0 || open_file();
  for (;;) {
    std::size_t bytes = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      writing_ = false;
      if (queue_.empty()) notify_drained();
      cv_.wait(lock, [this] { return !queue_.empty() || finishing_; });
      if (queue_.empty()) break;  // finished, and everything written (or dropped)
      while (!queue_.empty() && batch.size() < kMaxPieces &&
             (batch.empty() || bytes + queue_.front().size() <= kMaxBatch)) {
        bytes += queue_.front().size();
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      writing_ = true;
      write_started_ = std::chrono::steady_clock::now();
    }
    std::uint64_t written = 0;
    const int err = opened ? writev_fully(fd_, batch, written) : 0;  // never opened: every piece was dropped
    bool room = false;
    bool broke = false;
    std::uint64_t total = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.written_bytes += written;
      stats_.queued_bytes -= std::min<std::uint64_t>(stats_.queued_bytes, bytes);
      if (err != 0 && stats_.broken_errno == 0) {
        count_unwritten(batch, written, stats_);
        stats_.broken_errno = err;
        drop_queue_locked();
        broke = true;
      }
      total = stats_.written_bytes;
      if (congested_ && stats_.queued_bytes <= options_.high_water / 2) {
        congested_ = false;
        room = true;
      }
    }
    for (Buffer& piece : batch) Buffer::recycle(std::move(piece));
    batch.clear();
    // Outside the lock: the callbacks may call back into write() (they post to the agent's loop).
    if (broke && options_.on_break) options_.on_break(err, total, true);
    if (room) {
      std::lock_guard<std::mutex> room_lock(room_mu_);
      if (on_room_) on_room_();
    }
  }
  if (options_.owns_fd && fd_ >= 0) ::close(fd_);
  notify_drained();
}

bool wait_until_idle(const std::vector<WriteQueue*>& queues, int drained_fd, const sigset_t& interrupt) {
  const int sfd = ::signalfd(-1, &interrupt, SFD_CLOEXEC | SFD_NONBLOCK);
  bool idle = false;
  for (;;) {
    if (std::all_of(queues.begin(), queues.end(), [](WriteQueue* q) { return q->idle(); })) {
      idle = true;
      break;
    }
    pollfd fds[2] = {{drained_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    const int n = ::poll(fds, sfd >= 0 ? 2 : 1, -1);
    if (n < 0 && errno != EINTR) break;
    std::uint64_t count = 0;
    [[maybe_unused]] ssize_t r = ::read(drained_fd, &count, sizeof count);
    if (sfd >= 0 && (fds[1].revents & POLLIN) != 0) break;  // the signal stays pending: the caller decides
  }
  if (sfd >= 0) ::close(sfd);
  return idle;
}

void WriteQueue::notify_drained() {
  if (options_.drained_fd < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(options_.drained_fd, &one, sizeof one);
}

}  // namespace ddprun
