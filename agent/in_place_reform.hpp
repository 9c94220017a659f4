// Re-forming in place, a component of the agent in the manner of ChildReaper (callbacks in, decisions out): an
// elastic re-form in which nothing failed (a node joined, a node was lost) keeps the workers of this node when
// every one of them offered it (common/contract/worker_contract.hpp). The node reports itself stopped at once;
// the next round's assignment is handed to the running workers (a file of variables, then a number in their
// heartbeat slot) instead of a restart. What a worker saves is its start: no interpreter, no import, no data
// set, no checkpoint to read; the model stays in memory.
//
// Anything that goes wrong falls back to what a re-form does without it: a worker that does not take the new
// round up within --term-timeout is hung under --hang-timeout (judged job-wide), else replaced by a new one in
// the same round (as a restart would have replaced it); a worker that dies while the round forms is a worker
// failure of the new round (the rendezvous restarts the job under --max-restarts, or ends it).
//
// When the round also starts new workers elsewhere (a joiner), the kept ones would wait in the new group for
// those to start (an interpreter, imports: seconds on a busy machine, the whole job stalled). So the round is
// handed over only when the rendezvous says every node's workers can meet (round_ready from each node, then
// meet to all; kMeetWait at most): until then the kept workers train on in the old round. This node says
// round_ready at once when its workers stay, and when new ones start, once each is past its imports
// (worker_contract.hpp +56) or has beaten.
//
// The component owns the count of re-forms handed to the workers and the deadline for their taking one up; the
// stage (kReforming) is AgentLifecycle's. Unit-tested without processes in tests/agent/in_place_reform_test.cpp.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/agent_lifecycle.hpp"
#include "agent/event_log.hpp"
#include "agent/heartbeat_channel.hpp"
#include "agent/run_layout.hpp"
#include "agent/supervision_policy.hpp"
#include "agent/world.hpp"
#include "common/log.hpp"
#include "rendezvous/client.hpp"

namespace ddprun::agent {

class InPlaceReform {
 public:
  struct Host {
    std::function<int()> attempt;            // whose work directories the running workers use
    std::function<bool()> hang_inquiring;    // a hang inquiry is under way: no re-form in place then
    std::function<void()> pause_hang_watch;  // until the next round the workers may wait for it
    std::function<void()> resume_hang_watch;  // the new round runs: every worker judged afresh from now
    // These local ranks did not take the round up, under --hang-timeout: hung, judged job-wide.
    std::function<void(const std::vector<int>& local_ranks)> judge_hung;
    std::function<void(const rendezvous::StopOrder& order)> note_reform;  // the events file and the summary
    std::function<void()> report_stopped;     // to the rendezvous: this node's part of the old round is over
    std::function<void(int local_rank)> report_worker_failure;  // in the new round
    std::function<void(int local_rank, int rank)> rank_changed;  // the output's prefix, the live view's paces
    // Without --hang-timeout, a worker did not take the round up: this node's workers go (SIGKILL) and new ones
    // start in the same round.
    std::function<void()> replace_workers;
    // This node's workers can meet in that round; false when the rendezvous takes no such word (no meet comes).
    std::function<bool(int round)> report_round_ready;
  };
  // The longest the kept workers wait for the rendezvous' meet before they take the round up anyway (a joiner's
  // program that never says it is ready, a rendezvous that does not send meet).
  static constexpr std::chrono::seconds kMeetWait{10};
  // How often a held round whose hand-over came during a hang inquiry looks again whether it is over.
  static constexpr std::chrono::milliseconds kInquiryRecheck{100};

  InPlaceReform(boost::asio::io_context& io, const AgentConfig& config, const World& world, HeartbeatChannel& beats,
                SupervisionPolicy& policy, AgentLifecycle& lifecycle, const RunLayout& layout, Logger& log,
                EventLog& events, Host host);

  // New workers started: none has taken a re-form up yet. Once each can meet its peers, round_ready.
  void on_workers_started();
  // The rendezvous ordered a restarting re-form: true when this node's workers stay and take the next round up
  // (the node has reported itself stopped); false when the round goes the usual way.
  bool take(const rendezvous::StopOrder& order);
  // The assignment of the round this node re-forms into: handed to the running workers (or, when one ended
  // meanwhile, its failure goes the usual way in the new round).
  void on_assignment();
  // Every node of `round` can meet: the round held back since its assignment goes to the workers now.
  void on_meet(int round);
  // The deadline for taking the round up is void, and so is a round held back (a teardown began, the job is over).
  void cancel();
  std::int64_t announced() const { return announced_; }
  // An assignment written for the workers, not handed over until meet: they train on in the old round.
  bool held() const { return held_; }
  void set_meet_wait(std::chrono::milliseconds wait) { meet_wait_ = wait; }  // tests: kMeetWait is long

 private:
  bool workers_offer() const;
  bool all_workers_running() const;
  void leave_lost_group();
  void hand_over();
  void drop_held_round();
  void watch_ready(std::uint64_t watch);
  void check_ready(std::uint64_t watch);
  void on_ack_deadline();
  void lost_a_worker();

  const AgentConfig& config_;
  const World& world_;
  HeartbeatChannel& beats_;
  SupervisionPolicy& policy_;
  AgentLifecycle& lifecycle_;
  const RunLayout& layout_;
  Logger& log_;
  EventLog& events_;
  Host host_;
  std::int64_t announced_ = 0;  // in-place re-forms handed to the running workers
  boost::asio::steady_timer ack_timer_;  // bounds the workers' taking the new round up
  bool held_ = false;                      // an assignment written for the workers, not announced until meet
  boost::asio::steady_timer meet_timer_;   // bounds holding it (kMeetWait)
  std::chrono::milliseconds meet_wait_ = kMeetWait;
  boost::asio::steady_timer ready_timer_;  // polls new workers until each can meet
  std::uint64_t ready_watch_ = 0;          // the current poll; a queued check of an earlier one is stale
  std::chrono::steady_clock::time_point ready_until_{};  // polled until then at most
};

}  // namespace ddprun::agent
