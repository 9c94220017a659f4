// --events-file: one JSON object per line for each lifecycle event, for tools that watch a job:
//   {"event":"started","time_ms":...,"rank":0,"local_rank":0,"pid":123,"node_rank":0}
//   {"event":"exited", ... ,"state":"failed","exit_code":3}        (or "signal":9,"signal_name":"SIGKILL")
//   {"event":"teardown","time_ms":...,"reason":"worker_failed","signal":15}
//   {"event":"summary","time_ms":...,"exit_code":3,"root_cause":{...},"workers":[...]}
// Each line goes out in one write(2) on an O_APPEND descriptor: a reader never sees half a line.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <string>

namespace ddprun::agent {

class EventLog {
 public:
  EventLog() = default;
  // Opens (creating or truncating) `path`. Throws ddprun::CantCreateError naming the path when it cannot,
  // or when it is not a regular file (a FIFO's reader that stalls must never stall the agent; the open
  // itself never blocks on one).
  explicit EventLog(const std::string& path);
  ~EventLog();
  EventLog(EventLog&& other) noexcept;
  EventLog& operator=(EventLog&& other) noexcept;

  bool enabled() const { return fd_ >= 0; }
  // A write that fails (disk full) closes the file: nothing more is written, so no line is ever half there
  // after a later success; the caller asks `failed` at the end.
  void write(const nlohmann::json& event) const;
  bool failed() const { return failed_errno_ != 0; }
  int failed_errno() const { return failed_errno_; }
  std::uint64_t bytes_written() const { return bytes_; }

 private:
  mutable int fd_ = -1;
  mutable int failed_errno_ = 0;
  mutable std::uint64_t bytes_ = 0;
};

}  // namespace ddprun::agent
