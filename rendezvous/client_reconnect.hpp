// The client's side of a server restart (issue 19): what it takes to come back to a restarted ddprun-rendezvous
// with the workers still running, apart from the socket work (client.cpp does that).
//
// The workers do not need the rendezvous while they train: it matters only when something happens (a failure,
// the end, a re-form). So a client whose server said it is resumable (ChallengeMsg::resumable: no agent of the
// job hosts it) and that runs a round keeps going when it loses the server: it reconnects to the same endpoint
// with the usual back-off for at most ClientConfig::reconnect_timeout, and its hello claims its place in the
// round (ResumeClaim); the restarted server rebuilds the round from every node's claim
// (state_machine_resume.cpp). The reports that must not be lost (a failure, node_done) are kept since the
// round's assignment and sent again after the hello: the old server may have died before reading them. Other
// messages (heartbeats, the live view, hang views) mean nothing without a server and are dropped meanwhile.
// Between rounds (a re-form was under way at the old server) there is no round to claim: the node comes back
// with a plain hello once its workers are down (the agent's report_stopped, which the hello replaces), saying
// the last round it ran (HelloMsg::after_round), and the restarted server gathers the next round from those
// hellos, numbered after it (state_machine.cpp). Not resumable: before the first assignment, or a server an
// agent hosts (that node's workers died with it): the loss ends the client as before, unless the server fell
// silent while this node ran a round (on_lost's `silent`).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

class Reconnect {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Reconnect(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // `heartbeat_timeout`: the server's; an agent-hosted server's verdict on this node is asked for that long.
  void on_challenge(bool resumable, std::chrono::milliseconds heartbeat_timeout) {
    server_resumable_ = resumable;
    verdict_window_ = heartbeat_timeout;
  }
  // A round starts: its claim replaces the last one, and nothing of the last round is replayed.
  void on_assignment(const Assignment& a);
  // A re-form: between rounds there is nothing to resume (the next server gathers the next round afresh).
  void on_restart_ordered();
  // Keeps a copy of a report the server must not miss; false when `message` is dropped while disconnected.
  // A `stopped` report says this node's workers are down: a reconnection between rounds may now say hello.
  bool note_sent(const ClientMessage& message, const std::string& frame);
  // Lost between rounds while this node's workers were still going down: the hello waits for report_stopped.
  bool waiting_for_workers() const { return active_ && !round_ && !workers_down_; }
  // While reconnecting between rounds: the last round this node ran, for the hello (nullopt otherwise).
  std::optional<int> after_round() const;

  bool server_resumable() const { return server_resumable_; }  // what the last challenge said
  std::optional<int> last_round() const { return last_round_; }
  bool placed() const { return last_round_.has_value(); }  // an assignment came: a round holds this node
  bool active() const { return active_; }  // lost, not yet resumed
  // A loss: true when the client should reconnect (deadline set on the first loss of an episode), false when
  // it must end (not resumable, or the time is up).
  // `silent`: the server fell silent (a cut link, a frozen host), as opposed to a connection it closed or reset.
  // A server an agent hosts (not resumable) is then asked again for one heartbeat timeout (at most the
  // reconnect timeout): after a cut, it has judged this node lost and lingers to say so, so that every node
  // ends with the same root cause (issue 37); or, back in time, it takes this node back into the round.
  bool on_lost(const std::string& why, const std::string& where, Logger& log, bool silent = false);
  Clock::time_point deadline() const { return deadline_; }
  void on_attempt() { ++attempts_; }
  // The hello's claim while reconnecting (nullopt otherwise); the frames to send after it.
  std::optional<ResumeClaim> claim() const;
  const std::vector<std::string>& replay() const { return replay_; }
  // The restarted server answered the resume hello with something other than a refusal.
  void on_resumed(const std::string& where, Logger& log);
  // The server went on without this node (StopMsg::rejoin): the episode ends, nothing of the round is resumed.
  void on_dropped();
  // Why the client gives up: the loss, and how long and how often it tried to come back.
  std::string give_up(const std::string& where, const std::string& last) const;

 private:
  std::chrono::milliseconds timeout_;
  bool server_resumable_ = false;
  std::chrono::milliseconds verdict_window_{0};
  std::chrono::milliseconds episode_{0};  // this episode's length: timeout_, or the verdict window
  bool asking_verdict_ = false;           // this episode only asks node 0's server how the job ended
  std::optional<Assignment> round_;   // the round this node runs, while it runs
  std::optional<int> last_round_;     // the last round this node was placed in (restart_count)
  bool workers_down_ = true;          // false from an assignment until the report that its workers are down
  std::vector<std::string> replay_;   // failure / node_done frames of this round
  bool active_ = false;
  std::string lost_why_;
  Clock::time_point lost_at_;
  Clock::time_point deadline_;
  int attempts_ = 0;
};

}  // namespace ddprun::rendezvous
