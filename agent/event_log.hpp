// --events-file: one JSON object per line for each lifecycle event, for tools that watch a job:
//   {"event":"started","time_ms":...,"rank":0,"local_rank":0,"pid":123,"node_rank":0}
//   {"event":"exited", ... ,"state":"failed","exit_code":3}        (or "signal":9,"signal_name":"SIGKILL")
//   {"event":"teardown","time_ms":...,"reason":"worker_failed","signal":15}
//   {"event":"summary","time_ms":...,"exit_code":3,"root_cause":{...},"workers":[...]}
// Lines are written by a thread of their own (common/write_queue.hpp), whole, on an O_APPEND descriptor:
// a file system that stops answering holds that thread, never the agent's loop; a reader never sees half
// a line (one cut by a failed write is truncated away).
#pragma once

#include <signal.h>

#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "common/log.hpp"
#include "common/write_queue.hpp"

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

  // Starts the writer thread: after every fork of a single-threaded process (the job guard's).
  void start();
  bool enabled() const { return queue_ != nullptr || pending_fd_ >= 0; }
  // A write that fails (disk full) ends the file: nothing more is written, so no line is ever half there
  // after a later success; the caller asks `failed` at the end, after `drain`.
  void write(const nlohmann::json& event) const;
  // Waits until every event is written, or one of `interrupt`'s signals comes (then the rest is given up,
  // and the file counts as failed).
  void drain(const sigset_t& interrupt);
  bool failed() const;
  int failed_errno() const;
  std::uint64_t bytes_written() const;  // whole lines only
  // The job's exit code once the file is drained (`interrupt` as for drain): a file that could not be written
  // all through, `path`, is exit code 73 (README "Exit codes") when the job itself succeeded (said on the
  // console); a failed job keeps its code, and the log says what the file lacks.
  int exit_code_after(int job_code, const std::string& path, const sigset_t& interrupt, const Logger& log);

 private:
  void start_queue(int fd);
  struct State;  // shared with the writer thread's failure callback
  std::shared_ptr<State> state_;
  std::shared_ptr<WriteQueue> queue_;
  int pending_fd_ = -1;  // opened and checked, its thread not started yet
  int drained_fd_ = -1;
};

}  // namespace ddprun::agent
