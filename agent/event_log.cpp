#include "agent/event_log.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/console.hpp"
#include "common/counted.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/log.hpp"

namespace ddprun::agent {

EventLog::EventLog(const std::string& path) {
  const std::string not_regular = "cannot use events file " + path +
                                  ": not a regular file (ddprun writes its events to a file; follow it with tail -F)";
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0 && !S_ISREG(before.st_mode)) throw CantCreateError(not_regular);
  // O_NONBLOCK: opening a FIFO without a reader must fail at once, not wait for one. Not O_TRUNC yet: a
  // FIFO or device named by mistake is refused before anything is done to it.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) throw CantCreateError("cannot open events file " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw CantCreateError(not_regular);
  }
  ::fcntl(fd, F_SETFL, O_APPEND);  // back to blocking writes: a regular file
  if (::ftruncate(fd, 0) != 0) {
    const int err = errno;
    ::close(fd);
    throw CantCreateError("cannot truncate events file " + path, err);
  }
  pending_fd_ = fd;
}

void EventLog::start() {
  if (pending_fd_ < 0) return;
  start_queue(std::exchange(pending_fd_, -1));
}

struct EventLog::State {
  std::mutex mu;
  std::vector<std::uint64_t> line_ends;  // where each queued line ends in the file
  std::uint64_t queued = 0;
  int failed_errno = 0;
  std::uint64_t whole_bytes = 0;  // set on failure: what the file keeps
};

EventLog::~EventLog() {
  if (queue_) queue_->finish();  // closed once written
  if (pending_fd_ >= 0) ::close(pending_fd_);
}

EventLog::EventLog(EventLog&& other) noexcept
    : state_(std::move(other.state_)), queue_(std::move(other.queue_)),
      pending_fd_(std::exchange(other.pending_fd_, -1)), drained_fd_(std::exchange(other.drained_fd_, -1)) {}

EventLog& EventLog::operator=(EventLog&& other) noexcept {
  if (this != &other) {
    if (queue_) queue_->finish();
    if (pending_fd_ >= 0) ::close(pending_fd_);
    state_ = std::move(other.state_);
    queue_ = std::move(other.queue_);
    pending_fd_ = std::exchange(other.pending_fd_, -1);
    drained_fd_ = std::exchange(other.drained_fd_, -1);
  }
  return *this;
}

void EventLog::start_queue(int fd) {
  state_ = std::make_shared<State>();
  drained_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  WriteQueue::Options options;
  options.high_water = ~std::size_t{0};  // events are small and few: never back-pressure the loop
  options.drained_fd = drained_fd_;
  options.owns_fd = true;
  // In the writer thread: the fd is still open (the queue closes it only once finished).
  options.on_break = [state = state_, fd](int err, std::uint64_t written, bool) {
    std::lock_guard<std::mutex> lock(state->mu);
    std::uint64_t whole = 0;
    for (std::uint64_t end : state->line_ends)
      if (end <= written) whole = end;
    if (whole < written) {
      [[maybe_unused]] const int r = ::ftruncate(fd, static_cast<off_t>(whole));  // a reader never meets half a line
    }
    state->failed_errno = err;
    state->whole_bytes = whole;
    Logger().error("cannot write the events file: ", std::strerror(err), " after ", whole,
                   " bytes; no more events are written (exit code 73 if the job succeeds)");
  };
  queue_ = WriteQueue::create(fd, std::move(options));
  queue_->start();
}

void EventLog::write(const nlohmann::json& event) const {
  if (!queue_) return;
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->failed_errno != 0) return;
    state_->queued += line.size();
    state_->line_ends.push_back(state_->queued);
  }
  queue_->write(line);
}

void EventLog::drain(const sigset_t& interrupt) {
  if (!queue_ || wait_until_idle({queue_.get()}, drained_fd_, interrupt)) return;
  queue_->abandon();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->failed_errno == 0) {
    state_->failed_errno = EINTR;  // given up while the file system did not take it
    state_->whole_bytes = queue_->stats().written_bytes;
  }
}

bool EventLog::failed() const { return failed_errno() != 0; }

int EventLog::failed_errno() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->failed_errno;
}

std::uint64_t EventLog::bytes_written() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->failed_errno != 0 ? state_->whole_bytes : queue_->stats().written_bytes;
}

int EventLog::exit_code_after(int job_code, const std::string& path, const sigset_t& interrupt, const Logger& log) {
  drain(interrupt);
  if (!failed()) return job_code;
  const std::string why = failed_errno() == EINTR ? std::string("given up: its file system did not answer")
                                                  : "writing it failed (" + std::string(std::strerror(failed_errno())) + ")";
  const std::string what = "the events file " + path + " is incomplete: " + why + " after " +
                           counted(static_cast<long long>(bytes_written()), "byte");
  if (job_code != 0) {
    log.error(what, "; the exit code stays the job's (", job_code, ")");
    return job_code;
  }
  console::write(2, "ddprun: error: " + what + "; exit code " + std::to_string(kExitCantCreate) + "\n");
  return kExitCantCreate;
}

}  // namespace ddprun::agent
