// One logging facility: levels chosen at run time (--verbose, DDPRUN_LOG_LEVEL), every line tagged with
// part, node and pid, written to stderr whole (through common/console.hpp once the agent runs: queued, never
// blocking the loop) so lines from ddprun never interleave mid-line with each other or with worker output.
//
// A Logger is a small value: components get a copy (configuration passed by value, no mutable globals)
// and derive a tagged child with `for_part("rendezvous")`.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace ddprun {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

// "debug" | "info" | "warning" | "error" | "off" (case-insensitive); nullopt-like: returns false if unknown.
bool parse_log_level(std::string_view text, LogLevel& out);

class Logger {
 public:
  Logger() = default;
  Logger(LogLevel level, std::string part, std::string node, int fd = 2)
      : level_(level), part_(std::move(part)), node_(std::move(node)), fd_(fd) {}

  Logger for_part(std::string part) const { return Logger(level_, std::move(part), node_, fd_); }
  Logger for_node(std::string node) const { return Logger(level_, part_, std::move(node), fd_); }

  bool enabled(LogLevel level) const { return level >= level_ && level_ != LogLevel::kOff; }
  LogLevel level() const { return level_; }
  const std::string& node() const { return node_; }  // the SLURM node it names ("" outside a step)

  void write(LogLevel level, std::string_view message) const;

  template <typename... Args> void debug(const Args&... args) const { emit(LogLevel::kDebug, args...); }
  template <typename... Args> void info(const Args&... args) const { emit(LogLevel::kInfo, args...); }
  template <typename... Args> void warning(const Args&... args) const { emit(LogLevel::kWarning, args...); }
  template <typename... Args> void error(const Args&... args) const { emit(LogLevel::kError, args...); }
  // A note kept for later (the launcher's, said once the console runs): "warning: ..." and "debug: ..." at
  // their level, anything else as info.
  void note(const std::string& text) const;

 private:
  template <typename... Args>
  void emit(LogLevel level, const Args&... args) const {
    if (!enabled(level)) return;
    std::ostringstream out;
    (out << ... << args);
    write(level, out.str());
  }

  LogLevel level_ = LogLevel::kInfo;
  std::string part_ = "ddprun";
  std::string node_;
  int fd_ = 2;
};

// Writes all of `data` to fd, retrying on EINTR and short writes and waiting (poll) on a fd someone left
// non-blocking. Returns 0, or the errno that stopped it (ENOSPC for a write that took nothing); `written`
// grows by what went out, so a caller can say how much a file holds.
int write_fully(int fd, std::string_view data, std::uint64_t& written);
// write_fully without the details: false on a hard error (EPIPE, ENOSPC...).
bool write_all(int fd, std::string_view data);

}  // namespace ddprun
