// Where a hung worker is stuck, captured before it is killed: native stacks of every thread (eu-stack from
// elfutils, else gdb in batch mode) and, for a Python worker that registered faulthandler for
// DDPRUN_STACKS_SIGNAL (README "Hang detection"), its Python stacks; for a worker whose NCCL Flight Recorder
// listens on its FIFO, the recorder's dump (agent/flight_recorder.hpp). Asynchronous on the agent's loop: the
// tools are the agent's children, reaped by its ChildReaper and handed here through on_child_exit. The stacks
// are bounded by `limit`, the Flight Recorder dumps asked for by `dump_limit` (torch takes seconds to write one);
// what is there by then goes into one text file.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/flight_recorder.hpp"

namespace ddprun::agent {

struct CaptureTarget {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  std::string python_file;  // DDPRUN_STACKS_FILE of this worker: faulthandler writes there
  // Its NCCL Flight Recorder (agent/flight_recorder.hpp): the FIFO asked for a dump ("" none), the dump file,
  // whether to wait for it (only one in ddprun's private tree), and its path as the user will find it.
  std::string nccl_pipe;
  std::string nccl_dump;
  bool wait_for_nccl_dump = false;
  std::string nccl_dump_shown;
  // A child process of a hung worker (its DataLoader workers, a tool it waits on): native stacks only, under
  // the worker's rank. 0: the worker itself.
  pid_t child_of = 0;
};

// A Flight Recorder dump the capture asked for, and whether it was written by the capture's end.
struct NcclDump {
  int rank = 0;
  std::string path;
  std::string shown;
  bool written = false;
};

// The command that prints every thread's stack of `pid`, with the first of eu-stack and gdb found in
// `path_env` (a PATH value); none when neither is installed.
std::optional<std::vector<std::string>> stack_tool_command(pid_t pid, const std::string& path_env);

// A whole file's contents ("" when it cannot be read): the capture's own small files.
std::string read_file(const std::string& path);

// Whether `pid` has a handler for `signal` (/proc/PID/status SigCgt): sending it is then safe.
bool catches_signal(pid_t pid, int signal);

// The signal a Python worker registers faulthandler for (exported as DDPRUN_STACKS_SIGNAL): a real-time
// signal nothing else uses, rather than SIGUSR1/SIGUSR2, which ddprun forwards as a scheduler's notices.
int python_stacks_signal();

class StackCapture {
 public:
  using Done = std::function<void()>;
  explicit StackCapture(boost::asio::io_context& io) : io_(io), deadline_(io), dump_deadline_(io), poll_(io) {}

  // Captures every target into `out_path`; `done` runs on the loop once, when finished, after `limit` when no
  // Flight Recorder dump is awaited, else when the dumps are whole or at most after `dump_limit`.
  void start(std::vector<CaptureTarget> targets, std::string out_path, std::string path_env,
             std::chrono::milliseconds limit, std::chrono::milliseconds dump_limit, Done done);
  // True when `pid` was one of the capture's tools (the caller then has nothing else to do with it).
  bool on_child_exit(pid_t pid);
  bool active() const { return active_; }
  // Ends the capture now (the job is being stopped for another reason); `done` is not called.
  void abandon();
  // Of the last capture, once done: the Flight Recorder dumps asked for.
  std::vector<NcclDump> nccl_dumps() const;
  // Of the last capture, once done: a worker's native stacks as its tool printed them ("" when none).
  std::string native_stacks(pid_t pid) const;

 private:
  struct Tool {
    pid_t pid = 0;
    bool running = false;
  };
  void ask_nccl_dumps();
  void ask_python();
  void poll_outputs();
  // Every awaited dump written since the ask and unchanged since the poll's last look; `take_look`: this is the
  // poll's next look (only poll_outputs takes them, 20 ms apart, so that "unchanged" means the same thing).
  bool nccl_dumps_settled(bool take_look);
  std::string nccl_dump_note(std::size_t i) const;
  void finish();
  void kill_tools();
  std::string part_path(std::size_t i) const { return out_path_ + ".part" + std::to_string(i); }

  boost::asio::io_context& io_;
  boost::asio::steady_timer deadline_;       // the stack tools and Python's stacks
  boost::asio::steady_timer dump_deadline_;  // the Flight Recorder dumps, when one is awaited
  boost::asio::steady_timer poll_;
  std::vector<CaptureTarget> targets_;
  std::vector<Tool> tools_;  // one per target
  std::vector<std::string> notes_;  // per target: what could not be captured, and why
  std::vector<bool> python_asked_;
  std::vector<long long> python_sizes_;
  enum class DumpWait { kNone, kWaiting, kAskedOnly };  // kAskedOnly: asked, but its file is not ours to watch
  std::vector<DumpWait> nccl_wait_;
  std::vector<std::string> nccl_notes_;
  std::vector<FileMark> nccl_before_;  // the dump file before the ask (an older dump, or absent)
  std::vector<FileMark> nccl_last_;
  std::vector<bool> nccl_written_;  // at the capture's end
  std::map<pid_t, std::string> native_;  // the workers' (not their children's) native stacks, at the end
  std::string out_path_;
  std::string tool_name_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point python_until_;
  bool active_ = false;
  bool python_phase_ = false;
  Done done_;
};

}  // namespace ddprun::agent
