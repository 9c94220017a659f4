// A stop that another node's signal caused, inside a SLURM step whose proctrack plugin signals every process of
// the step (docs/MULTINODE.md, "Signals under SLURM"): scancel and time limits reach every node's slurmstepd
// within milliseconds of each other, so slurmstepd is sending the same signal to every process here too. Tearing
// down at once would give each worker a second copy (and some training scripts take a second SIGTERM as "exit
// now, no checkpoint"): the stop waits briefly for that signal. It comes through the agent's signal handling,
// which tears down without forwarding; when the wait is over the stop order's outcome is recorded either way.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>

#include "common/log.hpp"
#include "rendezvous/failure.hpp"

namespace ddprun::agent {

class PeerSignalWait {
 public:
  // Short enough not to matter when no signal comes.
  static constexpr std::chrono::milliseconds kWait{250};

  PeerSignalWait(boost::asio::io_context& io, Logger& log) : log_(log), timer_(io) {}

  // Whether a stop order whose root cause is `root` waits here: another node's ddprun was stopped (not a failure,
  // not this node's own signal), inside such a step, while this node's workers run.
  static bool applies(bool step_signals_reach_workers, bool ours, const rendezvous::Failure& root,
                      bool workers_running) {
    return step_signals_reach_workers && !ours && rendezvous::is_agent_stopped(root) && workers_running;
  }
  // Calls `then` after kWait, unless cancelled first.
  void wait(std::function<void()> then) {
    log_.debug("waiting up to ", kWait.count(), " ms for this node's slurmstepd to deliver the signal");
    timer_.expires_after(kWait);
    timer_.async_wait([then = std::move(then)](const boost::system::error_code& ec) {
      if (!ec) then();
    });
  }
  void cancel() { timer_.cancel(); }

 private:
  Logger& log_;
  boost::asio::steady_timer timer_;
};

}  // namespace ddprun::agent
