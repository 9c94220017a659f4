#include "agent/failure_reports.hpp"

#include <unistd.h>

#include <csignal>

#include "common/process/wait_status.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace rdzv = ddprun::rendezvous;

FailureReports::FailureReports(boost::asio::io_context& io, const AgentConfig& config, const World& world,
                               const SupervisionPolicy& policy, const AgentLifecycle& lifecycle, Logger& log,
                               Host host)
    : config_(config), world_(world), policy_(policy), lifecycle_(lifecycle), log_(log), host_(std::move(host)),
      reply_timer_(io) {}

// A worker of this node as the rendezvous names it; the caller adds how it failed.
rdzv::Failure FailureReports::failure_of(const WorkerRecord& w) const {
  rdzv::Failure f;
  f.node_rank = world_.node_rank;
  f.host = config_.host;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.pid = w.pid;
  return f;
}

void FailureReports::worker_failed(int local_rank) {
  const WorkerRecord& w = policy_.worker(local_rank);
  rdzv::Failure f = failure_of(w);
  f.kind = w.status.signaled ? rdzv::FailureKind::kSignaled : rdzv::FailureKind::kExited;
  if (w.status.signaled) f.signal = w.status.signal;
  else f.exit_code = w.status.code;
  f.time_unix_ms = w.end_ms;
  f.error_file_contents = w.error_message;
  f.message = w.reason;  // why it could not start, or who killed it: every node's summary says it
  host_.send(f);
}

void FailureReports::worker_hung(int local_rank, const std::string& message) {
  rdzv::Failure f = failure_of(policy_.worker(local_rank));
  f.kind = rdzv::FailureKind::kHung;
  f.signal = SIGKILL;
  f.time_unix_ms = unix_ms();
  f.message = message;
  host_.send(f);
}

// This node's ddprun itself was stopped: a node failure (no rank), which the rendezvous never restarts.
rdzv::Failure FailureReports::agent_stopped(int signal, std::int64_t time_ms) const {
  rdzv::Failure f;
  f.kind = rdzv::FailureKind::kAgentStopped;
  f.node_rank = world_.node_rank;
  f.host = config_.host;
  f.pid = ::getpid();
  f.signal = signal;
  f.time_unix_ms = time_ms;
  f.message = std::string("its ddprun received ") + process::signal_name(signal);
  return f;
}

JobCause FailureReports::signal_cause(int signal, const std::string& when) const {
  JobCause c;
  c.text = "ddprun on node " + std::to_string(world_.node_rank) + " (host " + config_.host + ") received " +
           process::signal_name(signal) + " " + when;
  c.exit_code = 128 + signal;
  c.node_rank = world_.node_rank;
  c.time_ms = unix_ms();
  return c;
}

void FailureReports::signal_received(int signal) {
  if (!lifecycle_.workers_started()) return left_between_rounds(signal);
  host_.send(agent_stopped(signal, unix_ms()));
  if (!host_.server_away()) return;
  // The rendezvous server is away (a restart under way): no stop order can come, and a stop signal must not
  // wait --rdzv-reconnect-timeout. This node ends once its workers are gone; a server that comes back finds it
  // missing and ends (or re-forms) the job for the others.
  host_.end_job(signal_cause(signal, "while the rendezvous server was away"), "signal");
}

void FailureReports::left_between_rounds(int signal) {
  const JobCause c = signal_cause(signal, lifecycle_.placed_once() ? "between restart rounds"
                                                                   : "before the rendezvous completed");
  if (!host_.hosting() && !lifecycle_.placed_once()) return host_.end_job(c, "signal");
  host_.send(agent_stopped(signal, c.time_ms));
  reply_timer_.expires_after(kStopReplyLimit);
  reply_timer_.async_wait([this, c](const boost::system::error_code& ec) {
    if (ec || lifecycle_.outcome_known()) return;
    log_.debug("no stop order from the rendezvous ", kStopReplyLimit.count(), " ms after reporting the signal");
    host_.end_job(c, "signal");
  });
}

}  // namespace ddprun::agent
