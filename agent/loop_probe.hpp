// DDPRUN_LOOP_PROBE_MS (benchmarks): a timer every that many ms records how late it fires, i.e. the longest time
// the agent's loop was busy or blocked, and how much of that was the loop's own work; logged at the end
// (scripts/bench/console_stall.py reads the line). A component of the agent with one timer and no callbacks.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <string>

namespace ddprun::agent {

class LoopProbe {
 public:
  explicit LoopProbe(boost::asio::io_context& io) : timer_(io) {}
  // Arms the probe when `period` is positive (the environment's DDPRUN_LOOP_PROBE_MS: period_from_environment).
  void start(std::chrono::milliseconds period);
  // For good: a tick already queued does not arm the timer again (it would keep the loop running).
  void cancel() {
    cancelled_ = true;
    timer_.cancel();
  }
  bool running() const { return period_.count() > 0; }
  // The line the benchmark reads: "event loop probe: longest lateness N us (...); longest stretch ...".
  std::string report() const;
  // DDPRUN_LOOP_PROBE_MS, or 0 (off).
  static std::chrono::milliseconds period_from_environment();

  // One tick at `now` after `expiry`, the loop thread's CPU time being `cpu_ns` (exposed for the unit test).
  void record(std::chrono::nanoseconds late, std::int64_t cpu_ns);

 private:
  void arm();

  boost::asio::steady_timer timer_;
  std::chrono::milliseconds period_{0};
  bool cancelled_ = false;
  std::chrono::nanoseconds max_late_{0};
  // The loop thread's CPU time over the period that ended in the longest lateness: close to the lateness,
  // a handler ran that long; far below it, the thread waited for a CPU (or in a system call).
  std::chrono::nanoseconds cpu_at_max_{0};
  std::int64_t last_cpu_ns_ = -1;
  // The most CPU time the loop thread used between two ticks: the longest stretch of the loop's own work
  // (handlers, system calls), whatever the scheduler did. The part of the lateness ddprun controls.
  std::chrono::nanoseconds max_cpu_{0};
};

}  // namespace ddprun::agent
