// The node's live view, a component of the agent in the manner of ChildReaper (callbacks in, decisions out):
// every kStatusPeriod it samples the workers (the heartbeat slots the agent reads anyway, /proc), tells the
// rendezvous (which judges stragglers from the paces and keeps every node's status for the others), writes
// --metrics-textfile, and answers ddprun-status on the agent's private Unix socket (agent/status_socket.hpp):
// this node fresh, the others as the rendezvous last heard them. It also says what the rendezvous names as
// stragglers, and under --straggler-action stop picks the local rank to stop.
//
// It owns its timers (the sampling tick, the wait for the others' view), the socket, the rate history and the
// stragglers named this round; the agent owns the workers. Unit-tested without processes in
// tests/agent/live_view_test.cpp.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/event_log.hpp"
#include "agent/heartbeat_channel.hpp"
#include "agent/live_status.hpp"
#include "agent/metrics_textfile.hpp"
#include "agent/status_socket.hpp"
#include "agent/supervision_policy.hpp"
#include "agent/world.hpp"
#include "common/log.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::agent {

class LiveView {
 public:
  // What the view asks of the agent, and what it decides.
  struct Host {
    std::function<std::string()> agent_state;  // rendezvous, running, restarting, stopping, done
    std::function<bool()> placed_once;         // the rendezvous placed this node once: it takes our status
    std::function<bool()> finished;            // the job is over here: no more samples, no view to wait for
    std::function<bool(int local_rank)> found_hung;  // by the hang inquiry, in the inquiry under way
    // This node's status (JSON) and its running ranks' paces, for the rendezvous.
    std::function<void(std::string status, std::vector<rendezvous::RankPace> paces)> report_status;
    std::function<void()> request_view;  // the rendezvous' view of the other nodes (answered by on_job_view)
    // --straggler-action stop: this running local rank goes, as a failure whose reason is `reason`.
    std::function<void(int local_rank, const std::string& reason)> stop_straggler;
  };

  LiveView(boost::asio::io_context& io, const AgentConfig& config, const World& world, HeartbeatChannel& beats,
           const SupervisionPolicy& policy, Logger& log, EventLog& events, Host host);
  ~LiveView();

  // Opens the socket (a warning when it cannot: the job runs without a live view) and takes the first sample.
  void start(std::int64_t agent_started_ms);
  // The job is over here: timers stop, the socket goes, requests waiting for the others' view are answered
  // with this node alone, and the textfile is removed.
  void stop();
  // One sample now: the rates remember it when `remember` (the periodic tick), not for a request.
  NodeStatus sample(bool remember);
  // A ddprun-status request; `reply` is called once, at once or when the others' view came (or did not).
  void on_request(StatusSocket::Reply reply);
  void on_job_view(const rendezvous::JobViewMsg& view);
  // The rendezvous named (or stopped naming) stragglers.
  void on_stragglers(const rendezvous::StragglersMsg& message);
  // A new round was assigned: the server judges stragglers afresh.
  void on_new_round() { stragglers_.clear(); }
  // The same workers took other ranks (a re-form in place): paces by rank start afresh.
  void on_ranks_changed() { rates_ = RateHistory(); }
  bool named_slow(int rank) const { return is_named(stragglers_, rank); }
  // Each running rank's pace over the straggler window, in a round that runs (a stopping round's paces
  // describe no one).
  std::vector<rendezvous::RankPace> running_paces() const;
  // This node's own measurement bears the judgement out (--straggler-action stop acts only then).
  bool own_pace_supports(const rendezvous::Straggler& s) const;
  // The ddprun-status document: {"nodes": [this node, then the others as the rendezvous last heard them],
  // "complete", "stragglers"}.
  std::string document(const rendezvous::JobViewMsg* view);

 private:
  void tick();
  void write_textfile(const NodeStatus& status);
  void answer_pending(const rendezvous::JobViewMsg* view);

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const World& world_;
  HeartbeatChannel& beats_;  // not const: a foreign clock is warned of once (take_foreign_clock_notice)
  const SupervisionPolicy& policy_;
  Logger& log_;
  EventLog& events_;
  Host host_;
  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer view_timer_;  // bounds the wait for the rendezvous' view of the other nodes
  std::unique_ptr<StatusSocket> socket_;
  std::vector<StatusSocket::Reply> pending_;  // requests waiting for the others' view
  RateHistory rates_;
  std::vector<rendezvous::Straggler> stragglers_;  // named by the rendezvous, this round
  std::map<pid_t, double> cpu_s_;  // each worker tree's CPU seconds at the last sample
  std::int64_t sampled_ns_ = 0;
  std::int64_t started_ms_ = 0;
  std::unique_ptr<TextfileWriter> textfile_;  // --metrics-textfile, off the loop (agent/metrics_textfile.hpp)
};

}  // namespace ddprun::agent
