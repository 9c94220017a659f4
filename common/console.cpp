#include "common/console.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/log.hpp"

namespace ddprun::console {
namespace {

// Coalesced writes: fewer system calls for a chatty job, still whole pieces (whole lines) per write.
constexpr std::size_t kMaxBatch = 256 * 1024;

std::uint64_t count_lines(std::string_view s) {
  return static_cast<std::uint64_t>(std::count(s.begin(), s.end(), '\n')) + (s.empty() || s.back() == '\n' ? 0 : 1);
}

class Channel {
 public:
  Channel(int fd, std::size_t high_water, int drained_fd, std::function<void()>* on_room, std::mutex* room_mu)
      : fd_(fd), high_water_(high_water), drained_fd_(drained_fd), on_room_(on_room), room_mu_(room_mu) {}

  void start() { std::thread([this] { loop(); }).detach(); }  // lives as long as the process

  void write(std::string_view data) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stats_.broken_errno != 0 || stats_.abandoned) {
        stats_.lost_bytes += data.size();
        stats_.lost_lines += count_lines(data);
        return;
      }
      queue_.emplace_back(data);
      stats_.queued_bytes += data.size();
      if (stats_.queued_bytes > high_water_) congested_ = true;
    }
    cv_.notify_one();
  }

  bool congested() {
    std::lock_guard<std::mutex> lock(mu_);
    return congested_;
  }

  // Nothing left to wait for: all written, or given up (a write blocked on a stalled reader is abandoned).
  bool idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.empty() && (!writing_ || stats_.abandoned);
  }

  void abandon() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.abandoned = true;
    drop_queue_locked();
  }

  // Congested, or one write waiting on the reader for a while: a healthy console takes a batch in well
  // under that.
  bool stalled() {
    std::lock_guard<std::mutex> lock(mu_);
    return congested_ || (writing_ && std::chrono::steady_clock::now() - write_started_ > std::chrono::milliseconds(100));
  }

  ChannelStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  void drop_queue_locked() {
    for (const std::string& piece : queue_) {
      stats_.lost_bytes += piece.size();
      stats_.lost_lines += count_lines(piece);
    }
    queue_.clear();
    stats_.queued_bytes = 0;
  }

  void loop() {
    std::string batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        writing_ = false;
        if (queue_.empty()) notify_drained();
        cv_.wait(lock, [this] { return !queue_.empty(); });
        batch.clear();
        while (!queue_.empty() && (batch.empty() || batch.size() + queue_.front().size() <= kMaxBatch)) {
          batch += queue_.front();
          queue_.pop_front();
        }
        writing_ = true;
        write_started_ = std::chrono::steady_clock::now();
      }
      std::uint64_t written = 0;
      const int err = write_fully(fd_, batch, written);
      bool room = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.written_bytes += written;
        stats_.queued_bytes -= std::min<std::uint64_t>(stats_.queued_bytes, batch.size());
        if (err != 0) {
          const std::string_view rest = std::string_view(batch).substr(written);
          stats_.lost_bytes += rest.size();
          stats_.lost_lines += count_lines(rest);
          stats_.broken_errno = err;
          drop_queue_locked();
        }
        if (congested_ && stats_.queued_bytes <= high_water_ / 2) {
          congested_ = false;
          room = true;
        }
      }
      // Outside the lock: the callback may call back into write() (it posts to the agent's loop).
      if (room) {
        std::lock_guard<std::mutex> room_lock(*room_mu_);
        if (*on_room_) (*on_room_)();
      }
    }
  }

  void notify_drained() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(drained_fd_, &one, sizeof one);
  }

  const int fd_;
  const std::size_t high_water_;
  const int drained_fd_;
  std::function<void()>* on_room_;
  std::mutex* room_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  ChannelStats stats_;
  bool congested_ = false;
  bool writing_ = false;
  std::chrono::steady_clock::time_point write_started_;
};

// Process-wide, never destroyed: a writer thread blocked on a stalled reader may outlive main's return.
struct Console {
  Channel* out = nullptr;
  Channel* err = nullptr;
  int drained_fd = -1;
  std::mutex room_mu;
  std::function<void()> on_room;
};
Console* g_console = nullptr;

bool same_file(int a, int b) {
  struct stat sa {}, sb {};
  if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && sa.st_rdev == sb.st_rdev;
}

Channel* channel_of(int fd) {
  if (g_console == nullptr) return nullptr;
  if (fd == 1) return g_console->out;
  if (fd == 2) return g_console->err;
  return nullptr;
}

}  // namespace

void start(std::size_t high_water) {
  if (g_console != nullptr) return;
  auto* c = new Console;
  c->drained_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  c->out = new Channel(1, high_water, c->drained_fd, &c->on_room, &c->room_mu);
  c->err = same_file(1, 2) ? c->out : new Channel(2, high_water, c->drained_fd, &c->on_room, &c->room_mu);
  // Writer threads take no signal: every signal stays for the agent's signalfd and its SIGCHLD reaper.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  c->out->start();
  if (c->err != c->out) c->err->start();
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  g_console = c;
}

bool started() { return g_console != nullptr; }

void set_on_room(std::function<void()> on_room) {
  if (g_console == nullptr) return;
  std::lock_guard<std::mutex> lock(g_console->room_mu);
  g_console->on_room = std::move(on_room);
}

void write(int fd, std::string_view data) {
  if (Channel* ch = channel_of(fd)) return ch->write(data);
  write_all(fd, data);
}

bool congested(int fd) {
  Channel* ch = channel_of(fd);
  return ch != nullptr && ch->congested();
}

bool drain(const sigset_t& interrupt) {
  if (g_console == nullptr) return true;
  const int sfd = ::signalfd(-1, &interrupt, SFD_CLOEXEC | SFD_NONBLOCK);
  bool drained = false;
  for (;;) {
    if (g_console->out->idle() && g_console->err->idle()) {
      drained = true;
      break;
    }
    pollfd fds[2] = {{g_console->drained_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    const int n = ::poll(fds, sfd >= 0 ? 2 : 1, -1);
    if (n < 0 && errno != EINTR) break;
    std::uint64_t count = 0;
    [[maybe_unused]] ssize_t r = ::read(g_console->drained_fd, &count, sizeof count);
    if (sfd >= 0 && (fds[1].revents & POLLIN) != 0) break;  // the signal stays pending: the caller decides
  }
  if (sfd >= 0) ::close(sfd);
  if (!drained) abandon();
  return drained;
}

void abandon() {
  if (g_console == nullptr) return;
  g_console->out->abandon();
  g_console->err->abandon();
}

void abandon_stalled() {
  if (g_console == nullptr) return;
  for (Channel* ch : {g_console->out, g_console->err})
    if (ch->stalled()) ch->abandon();
}

ChannelStats stats(int fd) {
  Channel* ch = channel_of(fd);
  return ch != nullptr ? ch->stats() : ChannelStats{};
}

bool shared_channel() { return g_console != nullptr && g_console->out == g_console->err; }

std::string channel_name(int fd) {
  if (shared_channel()) return "stdout and stderr";
  return fd == 1 ? "stdout" : "stderr";
}

}  // namespace ddprun::console
