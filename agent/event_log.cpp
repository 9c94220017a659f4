#include "agent/event_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"

namespace ddprun::agent {

EventLog::EventLog(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw CantCreateError("cannot open events file " + path, errno);
}

EventLog::~EventLog() {
  if (fd_ >= 0) ::close(fd_);
}

EventLog::EventLog(EventLog&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

EventLog& EventLog::operator=(EventLog&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void EventLog::write(const nlohmann::json& event) const {
  if (fd_ < 0) return;
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line += '\n';
  write_all(fd_, line);
}

}  // namespace ddprun::agent
