// What this node tells the rendezvous of its own failures, a component of the agent: a worker that failed or
// hung, and this ddprun's stop signal. The server takes the first failure it hears as the job's root cause and
// stops every node with it; a signal is a node failure (no rank), which it never restarts.
//
// A stop signal while no round runs here (waiting for the others, between restart rounds) is told only by a
// node the others wait on (the host, or one placed in a round); the stop order is then awaited briefly, never
// for long (kStopReplyLimit), and the node ends by itself without it. A joining node that was never placed just
// leaves. Unit-tested without a server in tests/agent/failure_reports_test.cpp.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "agent/agent_config.hpp"
#include "agent/agent_lifecycle.hpp"
#include "agent/supervision_policy.hpp"
#include "agent/world.hpp"
#include "common/log.hpp"
#include "rendezvous/failure.hpp"

namespace ddprun::agent {

class FailureReports {
 public:
  struct Host {
    std::function<void(const rendezvous::Failure&)> send;  // to the rendezvous
    std::function<bool()> server_away;  // the server was lost and is being looked for: no stop order can come
    std::function<bool()> hosting;      // this node hosts the server: the others wait on it
    // The job ends here without a stop order from the rendezvous, with `cause` (JobCause), for `reason`.
    std::function<void(const JobCause& cause, const char* reason)> end_job;
  };
  // How long a node that reported a signal waits for the rendezvous' stop order before it ends by itself.
  static constexpr std::chrono::milliseconds kStopReplyLimit{1000};

  FailureReports(boost::asio::io_context& io, const AgentConfig& config, const World& world,
                 const SupervisionPolicy& policy, const AgentLifecycle& lifecycle, Logger& log, Host host);

  // This local rank's worker failed (its record says how: exit code or signal, error file, reason).
  void worker_failed(int local_rank);
  // This local rank hung, decided by this node alone (rendezvous::hang_message).
  void worker_hung(int local_rank, const std::string& message);
  // This ddprun received a stop signal.
  void signal_received(int signal);
  // A stop signal while no round runs here.
  void left_between_rounds(int signal);
  void cancel() { reply_timer_.cancel(); }

 private:
  rendezvous::Failure failure_of(const WorkerRecord& w) const;
  rendezvous::Failure agent_stopped(int signal, std::int64_t time_ms) const;
  JobCause signal_cause(int signal, const std::string& when) const;

  const AgentConfig& config_;
  const World& world_;
  const SupervisionPolicy& policy_;
  const AgentLifecycle& lifecycle_;
  Logger& log_;
  Host host_;
  boost::asio::steady_timer reply_timer_;  // bounds the wait for the server's answer to our signal
};

}  // namespace ddprun::agent
