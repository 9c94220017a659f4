// A queue of whole pieces (lines) written to one file descriptor by a thread of its own, so that the
// thread that queues (the agent's event loop) never waits on the reader or the file system: a terminal
// paused with Ctrl-S, a stalled ssh, a hard-mounted NFS server that stopped answering. Used for ddprun's
// console (common/console.hpp) and for the workers' log files (agent/output_pump.hpp).
//
// - Every piece is written whole and in order; pieces queued together go out in one writev(2).
// - A piece is a Buffer: the caller may fill one (Buffer::take) and hand it over without a copy; once written it
//   goes back to a small process-wide pool, so a chatty job reuses a few buffers instead of faulting in new ones.
// - Above `high_water` queued bytes the queue is congested: the producer should stop feeding it until
//   `on_room` (called from the writer thread once below half of it).
// - A failed write (EPIPE, EIO, ENOSPC, ...) breaks the queue: what is queued and what comes later is dropped
//   and counted; `on_break` is called once (from the writer thread) with the errno and the bytes written.
// - `create_file(path, ...)`: the writer thread itself creates the file before its first write, so that a
//   file system that hangs or is full never holds the caller in open(2) or mkdir(2) (it makes the
//   directories too); a file that cannot be created
//   breaks the queue like a failed write (`on_break` with 0 bytes written, and `stats().never_opened`).
// - `finish()`: nothing more will come; once the rest is written the fd is closed (if owned) and the thread
//   ends. A queue that is never finished (the console) lives, with its thread, as long as the process.
#pragma once

#include <algorithm>
#include <chrono>
#include <csignal>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun {

// Bytes that grow without being zero-filled first (a read(2) lands in them directly), moved into a WriteQueue
// without a copy. append/push_back grow it geometrically; resize leaves new bytes uninitialised.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::string_view s) { append(s.data(), s.size()); }
  // An empty buffer of at least `capacity` bytes, from the pool when it holds one (no allocation, no page faults).
  static Buffer take(std::size_t capacity);
  // Back to the pool when it has room and the buffer is worth keeping (the writer threads call it).
  static void recycle(Buffer&& b);

  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return cap_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_.get(), size_}; }
  void clear() { size_ = 0; }
  void reserve(std::size_t n) {  // geometric: reserving a little more each time stays linear
    if (n > cap_) grow(std::max(n, cap_ + cap_ / 2));
  }
  void resize(std::size_t n) {
    reserve(n);
    size_ = n;
  }
  void append(const char* p, std::size_t n) {
    if (size_ + n > cap_) grow(std::max(size_ + n, cap_ * 2));
    if (n != 0) std::memcpy(data_.get() + size_, p, n);
    size_ += n;
  }
  void append(std::string_view s) { append(s.data(), s.size()); }
  void push_back(char c) {
    if (size_ == cap_) grow(std::max<std::size_t>(64, cap_ * 2));
    data_[size_++] = c;
  }

 private:
  void grow(std::size_t n);
  std::unique_ptr<char[]> data_;
  std::size_t size_ = 0;
  std::size_t cap_ = 0;
};

struct WriteQueueStats {
  std::uint64_t written_bytes = 0;
  std::uint64_t lost_bytes = 0;  // dropped: the queue broke, or its output was abandoned
  std::uint64_t lost_lines = 0;
  std::uint64_t queued_bytes = 0;
  int broken_errno = 0;  // 0: healthy
  bool abandoned = false;
  bool never_opened = false;  // create_file: the file could not be created (broken_errno says why)
};

class WriteQueue : public std::enable_shared_from_this<WriteQueue> {
 public:
  struct Options {
    std::size_t high_water = 4 << 20;
    int drained_fd = -1;      // an eventfd poked each time the queue becomes empty (-1: none)
    bool owns_fd = false;     // close the fd once finished and written
    // `opened`: false when create_file's file could not be created at all.
    std::function<void(int err, std::uint64_t written_bytes, bool opened)> on_break;
  };

  static std::shared_ptr<WriteQueue> create(int fd, Options options);
  // A new file at `path` (O_TRUNC, mode 0644, never following a symbolic link, never waiting for a FIFO's
  // reader), created by the writer thread; owned and closed by the queue.
  static std::shared_ptr<WriteQueue> create_file(std::string path, Options options);
  // Starts the writer thread, with every signal blocked in it (the agent's signalfd sees them all).
  void start();

  void write(std::string_view data);  // copied
  void write(Buffer&& data);          // taken as it is
  void finish();  // no more writes
  bool congested();
  // Nothing left to wait for: all written, or given up (a write blocked on a stalled reader is abandoned).
  bool idle();
  void abandon();  // drop what is queued and everything later (counted lost)
  // Congested, or one write waiting on the reader for a while (a healthy reader takes a batch far sooner).
  bool stalled();
  WriteQueueStats stats();
  // Replacing it (with nullptr too) waits for a call under way: after it returns, the old one is never called.
  void set_on_room(std::function<void()> on_room);

 private:
  WriteQueue(int fd, Options options) : fd_(fd), options_(std::move(options)) {}
  void loop();
  bool open_file();
  void drop_queue_locked();
  void notify_drained();

  int fd_;  // -1 until the writer thread created `path_`
  std::string path_;
  const Options options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Buffer> queue_;
  WriteQueueStats stats_;
  bool congested_ = false;
  bool writing_ = false;
  bool finishing_ = false;
  std::chrono::steady_clock::time_point write_started_;
  std::mutex room_mu_;
  std::function<void()> on_room_;
};

// Waits until every queue is idle (true), or until one of `interrupt`'s signals (blocked by the caller)
// arrives (false; the signal stays pending). `drained_fd`: the eventfd the queues poke.
bool wait_until_idle(const std::vector<WriteQueue*>& queues, int drained_fd, const sigset_t& interrupt);

// Lines in a piece (a last line without its newline counts).
std::uint64_t count_lines(std::string_view s);

}  // namespace ddprun
