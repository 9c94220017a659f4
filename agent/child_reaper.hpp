// Exit detection by event: SIGCHLD arrives on the Asio loop (signal_set's self-pipe), then waitpid(-1)
// reaps every child that has ended, workers and re-parented orphans alike (the agent is a subreaper).
// No polling interval anywhere: an exit is seen as soon as the loop runs.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <functional>

#include "common/process/wait_status.hpp"

namespace ddprun::agent {

class ChildReaper {
 public:
  // Called once per reaped child; then `after_batch` once per SIGCHLD with has_children = false when
  // waitpid reported ECHILD (nothing left to wait for: every descendant is gone).
  using ExitHandler = std::function<void(pid_t, const process::ExitStatus&)>;
  using BatchHandler = std::function<void(bool has_children)>;

  // Construct before the first child is started so no SIGCHLD can be missed.
  ChildReaper(boost::asio::io_context& io, ExitHandler on_exit, BatchHandler after_batch);

  void start();
  void stop();
  // Reaps what has ended right now (also used once at start-up, for children that ended before start()).
  void reap_now();

 private:
  void wait_next();

  boost::asio::signal_set sigchld_;
  ExitHandler on_exit_;
  BatchHandler after_batch_;
  bool stopped_ = false;
};

}  // namespace ddprun::agent
