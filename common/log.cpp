#include "common/log.hpp"

#include "common/console.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cctype>

namespace ddprun {

bool parse_log_level(std::string_view text, LogLevel& out) {
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower == "debug") out = LogLevel::kDebug;
  else if (lower == "info") out = LogLevel::kInfo;
  else if (lower == "warning" || lower == "warn") out = LogLevel::kWarning;
  else if (lower == "error") out = LogLevel::kError;
  else if (lower == "off" || lower == "quiet") out = LogLevel::kOff;
  else return false;
  return true;
}

int write_fully(int fd, std::string_view data, std::uint64_t& written) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      written += static_cast<std::uint64_t>(n);
      continue;
    }
    if (n == 0) return ENOSPC;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    return errno;
  }
  return 0;
}

bool write_all(int fd, std::string_view data) {
  std::uint64_t written = 0;
  return write_fully(fd, data, written) == 0;
}

void Logger::write(LogLevel level, std::string_view message) const {
  if (!enabled(level)) return;
  static constexpr const char* kNames[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
  std::string line;
  line.reserve(message.size() + 48);
  line += '[';
  line += part_;
  if (!node_.empty()) {
    line += ' ';
    line += node_;
  }
  line += " pid ";
  line += std::to_string(::getpid());
  line += "] ";
  line += kNames[static_cast<int>(level)];
  line += ": ";
  line += message;
  if (line.back() != '\n') line += '\n';
  console::write(fd_, line);  // never blocks once the agent runs
}

void Logger::note(const std::string& text) const {
  const std::string warning = "warning: ", debug = "debug: ";
  if (text.rfind(warning, 0) == 0) this->warning(text.substr(warning.size()));
  else if (text.rfind(debug, 0) == 0) this->debug(text.substr(debug.size()));
  else info(text);
}

}  // namespace ddprun
