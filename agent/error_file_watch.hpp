// A worker's failure known when its error file is written, not when its process is gone (issue 35).
//
// torch's @record and the worker SDK's run_main write TORCHELASTIC_ERROR_FILE as the exception leaves the program's
// entry point; what follows is the interpreter's own exit (atexit, the process group's destructor, thread joins),
// which took ~1 s of a 1 s teardown. This component watches the round's error files (inotify on each worker's
// work directory). A whole one gives its worker kRaisedExitGrace (common/timeouts.hpp) of its own time to exit:
// a program that exits at once (the SDK, a C++ writer with its own code) ends the job with its real exit, as
// before; one still exiting after it is failed then, with the code 1 an uncaught exception exits with, and the
// job torn down at once. "Its own time": time it spent waiting for a CPU on a loaded machine is added to the
// grace (/proc/PID/schedstat), so a verdict does not depend on the load, up to kRaisedExitGraceLimit of wall time.
//
// A component in the manner of ChildReaper: callbacks in, decisions out; it owns its descriptor and timers.
// Where inotify cannot be used (a per-user instance limit reached), nothing is watched: the worker's exit
// ends the job as before (the slow path, never a different verdict).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/supervision/error_file.hpp"

namespace ddprun::agent {

class ErrorFileWatch {
 public:
  struct Host {
    // The pid of a worker whose whole error file was just read, when its exit may still end the job its own
    // way (it runs, the round takes failures); 0: leave it to its exit.
    std::function<pid_t(int local_rank)> raiser_pid;
    // Its grace is over and it has not been seen to exit: the agent fails it with what its file says.
    std::function<void(int local_rank, const supervision::ErrorFileContents& contents)> on_grace_over;
  };
  ErrorFileWatch(boost::asio::io_context& io, Host host);
  ~ErrorFileWatch();
  ErrorFileWatch(const ErrorFileWatch&) = delete;
  ErrorFileWatch& operator=(const ErrorFileWatch&) = delete;

  // Watches this round's error files (index: local rank; each in its own directory, which exists), in place of
  // an earlier round's, from `after` on: a file already written by then is read at once. The delay spares a
  // round that ends quickly the watch's cost (one inotify descriptor serves every round, but its close at the
  // job's end waits for a kernel grace period: up to ~20 ms), while a Python worker is still importing.
  void watch(const std::vector<std::string>& error_files, std::chrono::milliseconds after);
  // Whether the watch runs now; false before `after`, or when inotify cannot be used.
  bool watching() const { return !local_rank_of_watch_.empty(); }

  // A worker exited: its grace, if it has one, has nothing left to do, and its file is not watched any more.
  void on_exit(int local_rank);
  // Stops watching and ends every grace: the job is over (closes the descriptor).
  void cancel();

  // How much of `wall` a process was given, when `waited_for_cpu` of it was spent waiting on a run queue (exposed
  // for the unit test).
  static std::chrono::nanoseconds own_time(std::chrono::nanoseconds wall, std::chrono::nanoseconds waited_for_cpu);

 private:
  struct Grace {
    explicit Grace(boost::asio::io_context& io) : timer(io) {}
    boost::asio::steady_timer timer;
    pid_t pid = 0;
    std::chrono::steady_clock::time_point since;
    std::int64_t run_delay_at_start = -1;  // ns, /proc/PID/schedstat; -1: not known (wall time only)
    std::int64_t written_ns = 0;  // the file's modification time: which raiser failed first
    supervision::ErrorFileContents contents;
  };
  void close_descriptor();
  void remove_watches();
  bool start_watching();
  void wait_readable();
  void read_events();
  void check(int local_rank);
  void arm(int local_rank, std::chrono::nanoseconds after);
  void on_timer(int local_rank);

  boost::asio::io_context& io_;
  Host host_;
  boost::asio::posix::stream_descriptor inotify_;
  boost::asio::steady_timer start_timer_;
  std::uint64_t round_ = 0;  // each watch() and cancel(): a start queued before it is stale
  std::vector<std::string> files_;
  std::unordered_map<int, int> local_rank_of_watch_;
  std::vector<bool> handed_;  // a whole file was read for this local rank (each at most once a round)
  std::map<int, std::unique_ptr<Grace>> graces_;  // by local rank
};

}  // namespace ddprun::agent
