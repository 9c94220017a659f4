// The agent's job signals, read on the Asio loop from a signalfd, each with its sender: Asio's signal_set
// says which signal came but not who sent it, and under SLURM that decides whether the workers already have
// it (agent/node_agent.cpp, on_signal).
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <string>

namespace ddprun::agent {

struct ReceivedSignal {
  int signal = 0;
  pid_t sender = 0;  // 0 when the kernel raised it (e.g. a terminal's Ctrl-C) rather than kill(2)
};

class SignalReader {
 public:
  // `set` must already be blocked in every thread of the process (block_job_signals in main), or a signal
  // could take its default action before the signalfd sees it. Throws SystemError.
  SignalReader(boost::asio::io_context& io, const sigset_t& set);
  // Calls `on_signal` on the loop for each signal until cancel().
  void start(std::function<void(const ReceivedSignal&)> on_signal);
  void cancel();

 private:
  void read_next();

  boost::asio::posix::stream_descriptor fd_;
  std::function<void(const ReceivedSignal&)> on_signal_;
  signalfd_siginfo info_{};
  bool stopped_ = false;
};

// The short name of process `pid` (/proc/PID/comm), "" when it is gone or unreadable.
std::string process_name(pid_t pid);

}  // namespace ddprun::agent
