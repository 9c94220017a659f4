// The node's part of hang detection (--hang-timeout), a component of the agent in the manner of ChildReaper:
// callbacks in, decisions out. One timer reads every worker's heartbeat slot (agent/heartbeat_channel.hpp) and
// asks agent/hang_watch.hpp who is hung. Then the stacks of every worker of the node are captured
// (agent/stack_capture.hpp) and the node's view (each rank's step, silence, quiet phase, whether it is
// stopped, where its stacks say it waits) goes to the rendezvous, which gathers every other node's view the
// same way and names the rank that is behind (rendezvous/hang_verdict.hpp), says it could not tell, or defers
// while a rank is inside a quiet phase it declared. The agent acts on what comes back: `kill_hung` kills the
// named ranks with SIGKILL and tears the job down with "hung" as the root cause (or restarts it, as
// --max-restarts allows), on every node.
//
// The inquiry owns its timers (the watch, the wait for a verdict), the capture and what it found; the agent
// owns the workers. Unit-tested without processes in tests/agent/hang_inquiry_test.cpp.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/event_log.hpp"
#include "agent/heartbeat_channel.hpp"
#include "agent/run_layout.hpp"
#include "agent/stack_capture.hpp"
#include "agent/supervision_policy.hpp"
#include "common/log.hpp"
#include "rendezvous/failure.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::agent {

class HangInquiry {
 public:
  // What the inquiry asks of the agent, and what it decides.
  struct Host {
    std::function<bool()> round_runs;     // the round's workers started and nothing stops them
    std::function<bool()> outcome_known;  // the job's end is decided: no verdict of this node's own any more
    std::function<int()> node_rank;       // this round's
    std::function<int()> attempt;         // whose work files the running workers use
    std::function<bool(int rank)> named_slow;  // the rendezvous names this rank a straggler now
    // The workers train on in the previous round while the new one is held for a joiner's (InPlaceReform).
    std::function<bool()> round_held;
    std::function<void(const rendezvous::HangViewMsg&)> send_view;
    // These local ranks are hung: kill each with SIGKILL (a hung process may never act on SIGTERM), record
    // it as hung and tear the rest down as the policy says. True when that began the job's teardown.
    std::function<bool(const std::vector<int>& local_ranks)> kill_hung;
    // A verdict this node took alone (no answer from the rendezvous): the root cause to report, as this
    // local rank's failure with `message` (rendezvous::hang_message).
    std::function<void(int local_rank, const std::string& message)> report_hang;
  };

  HangInquiry(boost::asio::io_context& io, const AgentConfig& config, const HeartbeatChannel& beats, RunLayout& layout,
              const SupervisionPolicy& policy, Logger& log, EventLog& events, Host host);

  // A round's workers started, or re-formed in place (`handed_over`): every worker is judged afresh from now. Workers
  // handed a re-formed round were alive in the job: each owes its first beat of the new round within
  // --hang-timeout, where a new worker that never beats is judged only by --hang-initial-timeout (issue 56: a joiner
  // that hung after saying it was ready held the kept workers in the new group's set-up, unseen, for good).
  void start_round(bool handed_over = false);
  // Looks at the beats now and arms the timer for the next look (nothing when no worker is watched).
  void watch();
  // Until the next round the workers may wait for it (a re-form in place): nobody's silence.
  void pause_watch();
  // fg after Ctrl-Z: the workers were stopped too, so their last beats are as old as the pause.
  void on_job_resumed();
  // The rendezvous asks: a worker on another node hung. This node's workers are captured and reported.
  void on_capture_requested();
  // These workers did not take a re-formed round up within --term-timeout (agent/in_place_reform.hpp): under
  // --hang-timeout they are hung as any silent worker is (stacks, the job-wide verdict), not quietly replaced.
  void judge_not_taken_up(const std::vector<int>& local_ranks);
  // The job's stop order: when it is a hang verdict for a rank of this node (or one that could not tell), the
  // silent ranks go with SIGKILL (kill_hung).
  void on_stop_order(const rendezvous::Failure& root_cause);
  // A declared quiet phase somewhere in the job: the silent workers here wait for it.
  void on_deferred(const rendezvous::HangDeferredMsg& m);
  // A restarted ddprun-rendezvous took this node back: a verdict this node still waits for was lost with the old
  // server, so its view goes again (the new server asks the other nodes anew).
  void on_server_resumed();
  // True when `pid` was one of the capture's stack tools.
  bool on_child_exit(pid_t pid) { return capture_.on_child_exit(pid); }
  // The job is being torn down, or ends: timers and the capture stop.
  void cancel();

  // The one truth of "silent since" (issue 31): the worker's last beat as it happened (CLOCK_MONOTONIC), or the
  // round's start for one that never beat. The log, the `hung` event, the view the verdict reads (and so the
  // summary) and the live view all say this; a pause of the whole job moves only *when* a worker is judged.
  std::int64_t silent_since_ns(int local_rank) const;
  // Found hung by this node's watch, in the inquiry under way (the live view says "hung").
  bool found_hung(int local_rank) const;
  bool inquiring() const { return !hung_.empty(); }
  // The Flight Recorder dumps the run's captures wrote, for the summary.
  const std::vector<NcclDump>& nccl_dumps() const { return nccl_dumps_; }
  // Where a worker's faulthandler writes its Python stacks, and where its NCCL Flight Recorder dumps
  // (exported to it at its start: agent/env_contract.hpp).
  std::string stacks_file(int local_rank) const;
  std::string flight_recorder_prefix(int local_rank) const;

 private:
  struct HungWorker {
    int local_rank = 0;
    std::int64_t step = -1;
    std::int64_t silent_ms = 0;
    std::int64_t last_beat_ms = 0;
    bool never_beat = false;  // --hang-initial-timeout
    bool not_taken_up = false;  // a re-formed round not taken up within --term-timeout
  };
  bool judging() const { return host_.round_runs() && !capture_.active(); }
  void on_hung(std::vector<int> hung, std::int64_t now_ns);
  void start_capture();
  void on_captured();
  rendezvous::HangViewMsg view() const;
  void decide_alone();
  void await_verdict();
  std::string hang_stacks_file() const;

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const HeartbeatChannel& beats_;
  RunLayout& layout_;
  const SupervisionPolicy& policy_;
  Logger& log_;
  EventLog& events_;
  Host host_;
  boost::asio::steady_timer watch_timer_;
  std::uint64_t watch_number_ = 0;  // pause_watch() and start_round() make a queued check stale
  boost::asio::steady_timer verdict_timer_;  // bounds the wait for the rendezvous' verdict
  StackCapture capture_;
  std::int64_t round_started_ns_ = 0;  // CLOCK_MONOTONIC when this round's workers started (initial timeout)
  bool handed_over_ = false;           // start_round(true): this round's workers were kept from the last one
  // Beats older than this count as made at this time when judging: a pause of the whole job (Ctrl-Z, a frozen
  // machine) is nobody's silence. Set on SIGCONT and when the watch timer fires late (StallClock's threshold).
  std::int64_t pause_end_ns_ = 0;
  std::vector<HungWorker> hung_;  // of the capture under way, the root cause first
  bool suspect_ = false;          // the capture under way is for a hang found here (else: asked by the server)
  bool verdict_pending_ = false;  // this node's suspect view went out and no verdict (nor deferral) came back
  std::string stacks_path_;
  std::set<int> stopped_at_capture_;  // local ranks whose process was stopped as the capture began
  // Local rank → not judged before (CLOCK_MONOTONIC): waiting for a rank's declared quiet phase (on_deferred).
  std::map<int, std::int64_t> exempt_until_ns_;
  std::vector<NcclDump> nccl_dumps_;  // written by the run's captures, for the summary
};

}  // namespace ddprun::agent
