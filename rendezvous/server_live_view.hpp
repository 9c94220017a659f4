// The server's part of the live view (agent/live_status.hpp): every joined node's latest status, handed back
// whole on request, and the job-wide judgement of their ranks' paces (straggler_watch.hpp), told to every
// node when the ranks named stragglers change.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "rendezvous/protocol.hpp"
#include "rendezvous/straggler_watch.hpp"

namespace ddprun::rendezvous {

class ServerLiveView {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ServerLiveView(StragglerRule rule) : stragglers_(rule) {}

  // A joined node's status (node_rank -1: not placed in a round, so its paces mean nothing yet), its paces
  // already kept to the node's own ranks (own_paces). Recorded only: O(the node's ranks).
  void on_status(std::uint64_t conn, int node_rank, const std::string& host, NodeStatusMsg status,
                 Clock::time_point now);
  // The node's connection is gone: its status and paces go.
  void forget(std::uint64_t conn, int node_rank);
  // The server's timer: judges the paces at most once per kJudgeEvery (issue 33: judged at every status, a
  // 1 024-rank job overloaded the server). The message for every node of the round when the ranks named
  // stragglers changed.
  std::optional<StragglersMsg> tick(Clock::time_point now);
  static constexpr std::chrono::milliseconds kJudgeEvery{1000};
  // A new round: its ranks are judged afresh.
  void new_round() { stragglers_.clear(); }
  // Every connected node's latest status, in order of connection, within `max_frame_bytes`: a job too
  // large for one frame gets the nodes that fit (the asking agent says the view is incomplete), never an
  // oversized frame, which would end the server.
  JobViewMsg job_view(std::size_t max_frame_bytes, Clock::time_point now) const;
  // The view is built at most once per kViewEvery for everyone, and each view_request in that period is
  // answered with the same frame (no copy): at 10 000 nodes a view is up to a MiB, and no message handler does
  // work that grows with the job (issue 33). Every request is answered (ddprun-status polled faster than the
  // period still sees every node); a node that asks and never reads is closed at its outbox bound.
  static constexpr std::chrono::milliseconds kViewEvery{250};

 private:
  struct Entry {
    std::string status;  // JSON text, kept as sent
    Clock::time_point at;
  };
  std::map<std::uint64_t, Entry> statuses_;  // by connection
  StragglerWatch stragglers_;
  std::optional<Clock::time_point> judged_at_;  // the last judgement
};

}  // namespace ddprun::rendezvous
