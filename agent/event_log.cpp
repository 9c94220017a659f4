#include "agent/event_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddprun::agent {

EventLog::EventLog(const std::string& path) {
  const std::string not_regular = "cannot use events file " + path +
                                  ": not a regular file (ddprun writes its events to a file; follow it with tail -F)";
  struct stat before {};
  if (::stat(path.c_str(), &before) == 0 && !S_ISREG(before.st_mode)) throw CantCreateError(not_regular);
  // O_NONBLOCK: opening a FIFO without a reader must fail at once, not wait for one. Not O_TRUNC yet: a
  // FIFO or device named by mistake is refused before anything is done to it.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd_ < 0) throw CantCreateError("cannot open events file " + path, errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw CantCreateError(not_regular);
  }
  ::fcntl(fd_, F_SETFL, O_APPEND);  // back to blocking writes: a regular file
  if (::ftruncate(fd_, 0) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw CantCreateError("cannot truncate events file " + path, err);
  }
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

EventLog::EventLog(EventLog&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), failed_errno_(other.failed_errno_), bytes_(other.bytes_) {}

EventLog& EventLog::operator=(EventLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    failed_errno_ = other.failed_errno_;
    bytes_ = other.bytes_;
  }
  return *this;
}

void EventLog::write(const nlohmann::json& event) const {
  if (fd_ < 0) return;
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  std::uint64_t written = 0;
  const int err = write_fully(fd_, line, written);
  if (err == 0) {
    bytes_ += written;
    return;
  }
  failed_errno_ = err;
  // A line cut short is taken back, so a reader never meets half a JSON object.
  if (written > 0) {
    [[maybe_unused]] const int r = ::ftruncate(fd_, static_cast<off_t>(bytes_));
  }
  ::close(fd_);
  fd_ = -1;
  Logger().error("cannot write the events file: ", std::strerror(failed_errno_), " after ", bytes_,
                 " bytes; no more events are written (exit code 73 if the job succeeds)");
}

}  // namespace ddprun::agent
