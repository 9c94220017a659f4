// A standalone server cut off from its nodes (issue 37): the rendezvous host's link goes down while the nodes
// still reach each other, so the training goes on and every worker may well succeed.
//
// A server that hears from no node at all is far more likely cut off itself than facing every node dead at
// the same moment. Before, it judged the first silent node lost, stopped the job and exited 1, and the nodes,
// reconnecting after the heal (client_reconnect.hpp), found nobody: every node exited 74 with its workers
// succeeded. Now:
//  - A node's heartbeat deadline passes while every node of the round has been silent for most of the timeout
//    (config: resumable servers only; an agent hosting the server is one of the nodes and never silent to it):
//    no judgement. The server keeps the round for config.reconnect_grace (the agents' --rdzv-reconnect-timeout)
//    and says why. Past it, the nodes still silent are judged as ever.
//  - A node comes back: on its old connection (the cut was short enough for TCP), or with a resume hello once
//    its agent gave the connection up (reconnect_into_running: its place in the round is silent, so the claim
//    takes it over). Every node still silent then gets one fresh heartbeat timeout to do the same.
// What it cannot tell apart: a rack that lost power with every node of the job, and no server link down. The
// job then ends config.reconnect_grace later than it would have (nobody is left to tell).
#include <algorithm>

#include "common/counted.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/state_machine_rules.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

bool telling_the_silent(const RendezvousState& state) {
  return state.phase == Phase::kStopped && state.root_cause && !state.untold_silent.empty();
}

namespace rules {
namespace {

// A round is placed and not over: the only time a silence can be forgiven or a place taken back.
bool round_runs(const RendezvousState& state) {
  return state.phase == Phase::kRunning || state.phase == Phase::kRestarting;
}

// Silent this long, a node counts as part of a silence that struck every node at once. Nodes beat every
// heartbeat_interval, so at the first node's deadline the others' last beats are at most an interval or two
// younger; half the timeout keeps a timeout of two intervals meaningful.
std::chrono::milliseconds common_silence(const JobConfig& c) {
  return std::max(c.heartbeat_timeout / 2, c.heartbeat_timeout - 2 * c.heartbeat_interval);
}

bool every_node_silent(const RendezvousState& state, const Now& now) {
  const auto silence = common_silence(state.config);
  return !state.nodes.empty() && std::all_of(state.nodes.begin(), state.nodes.end(), [&](const auto& entry) {
    return now.steady - entry.second.last_seen >= silence;
  });
}

// The grace is over and nobody came back: every node still silent is lost, the longest silent first (the root
// cause of a job of fixed size, which stops at the first; an elastic job re-forms without each).
void judge_the_silent(RendezvousState& state, const Now& now, Actions& out) {
  const std::chrono::milliseconds grace = state.config.reconnect_grace;
  state.cut_off_since.reset();
  std::vector<std::pair<Clock::time_point, ConnId>> silent;
  for (const auto& [conn, node] : state.nodes)
    if (now.steady - node.last_seen >= state.config.heartbeat_timeout) silent.emplace_back(node.last_seen, conn);
  std::sort(silent.begin(), silent.end());
  for (const auto& [last_seen, conn] : silent) {
    if (!round_runs(state)) return;
    const auto gone = std::chrono::duration_cast<std::chrono::milliseconds>(now.steady - last_seen);
    silent_node_lost(state, conn,
              "missed heartbeats for " + text::seconds(gone) + " (the timeout, " +
                  text::seconds(state.config.heartbeat_timeout) + ", and " + text::seconds(grace) +
                  " more in case the rendezvous server's own link was cut)",
              now, out);
  }
}

}  // namespace

bool suspect_own_link(RendezvousState& state, ConnId conn, const Now& now, Actions& out) {
  if (!state.config.resumable || state.config.reconnect_grace.count() <= 0) return false;
  if (!round_runs(state)) return false;
  if (!state.cut_off_since) {
    if (!every_node_silent(state, now)) return false;
    state.cut_off_since = now.steady;
    for (auto& [id, node] : state.nodes)
      node.reclaimable_until = now.steady + state.config.reconnect_grace + state.config.heartbeat_timeout;
    out.push_back(Log{LogLevel::kWarning,
                      "heard from none of the " + counted(state.nodes.size(), "node") + " for " +
                          text::seconds(state.config.heartbeat_timeout) +
                          ": this server is more likely cut off from them than every node dead at once; keeping "
                          "round " + std::to_string(state.restart_count) + " for " +
                          text::seconds(state.config.reconnect_grace) + " for them to come back"});
  }
  if (now.steady >= *state.cut_off_since + state.config.reconnect_grace) return false;  // judged as ever
  // Looked at again a timeout later: now + timeout is never before a deadline already queued (each was set at an
  // earlier `now` plus the same timeout), so the queue stays sorted. The grace's end is check_cut_off's.
  state.deadlines.emplace_back(now.steady + state.config.heartbeat_timeout, conn);
  return true;
}

void check_cut_off(RendezvousState& state, const Now& now, Actions& out) {
  if (!state.cut_off_since) return;
  if (!round_runs(state)) {
    state.cut_off_since.reset();
    return;
  }
  if (now.steady >= *state.cut_off_since + state.config.reconnect_grace) return judge_the_silent(state, now, out);
  const auto back = std::find_if(state.nodes.begin(), state.nodes.end(), [&](const auto& entry) {
    return entry.second.last_seen > *state.cut_off_since;
  });
  if (back == state.nodes.end()) return;
  out.push_back(Log{LogLevel::kWarning, "node " + std::to_string(back->second.node_rank) + " (host \"" +
                                            back->second.host + "\") is heard again after " +
                                            text::seconds(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                now.steady - *state.cut_off_since + state.config.heartbeat_timeout)) +
                                            " of silence from every node: this server's link is back; the nodes "
                                            "still silent have " + text::seconds(state.config.heartbeat_timeout) +
                                            " to return"});
  state.cut_off_since.reset();
  for (auto& [conn, node] : state.nodes) {
    if (node.last_seen + state.config.heartbeat_timeout > now.steady) continue;
    node.spared_until = now.steady + state.config.heartbeat_timeout;
    state.deadlines.emplace_back(node.spared_until, conn);
  }
}

namespace {

// node_lost, and the node is remembered to be told when it comes back asking, if its loss is what stopped the job
// (an elastic re-form, a job already over: nothing to tell it later that its next hello would not learn).
void lost_and_maybe_told_later(RendezvousState& state, ConnId conn, const std::string& why, const Now& now,
                               Actions& out) {
  auto it = state.nodes.find(conn);
  const int rank = it != state.nodes.end() ? it->second.node_rank : -1;
  const bool was_running = round_runs(state);
  node_lost(state, conn, why, now, out);
  if (rank >= 0 && was_running && state.phase == Phase::kStopped) state.untold_silent.insert(rank);
}

}  // namespace

// Issue 53, invariant 1: a node dropped for its silence may be alive behind a cut, its workers still running;
// its agent stops them once it has heard nothing for the heartbeat timeout (agent/round_fence.hpp). An elastic job
// that re-forms without it starts no round before then (fenced_until), with room for the agent's own timer (it
// looks every interval, and its last word from here may be an interval younger) and the kill.
void silent_node_lost(RendezvousState& state, ConnId conn, const std::string& why, const Now& now, Actions& out) {
  auto it = state.nodes.find(conn);
  if (it != state.nodes.end() && it->second.node_rank >= 0 && is_elastic(state.config) && round_runs(state)) {
    const Clock::time_point fenced = it->second.last_seen + state.config.heartbeat_timeout + round_fence_margin(state.config);
    if (fenced > now.steady && (!state.fenced_until || *state.fenced_until < fenced)) {
      state.fenced_until = fenced;
      out.push_back(Log{LogLevel::kInfo, "no round starts for " +
                                             text::seconds(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 fenced - now.steady)) +
                                             ": node " + std::to_string(it->second.node_rank) + " (host \"" +
                                             it->second.host + "\") may still run its workers until its agent, "
                                             "hearing nothing, stops them"});
    }
  }
  lost_and_maybe_told_later(state, conn, why, now, out);
}

// A server no agent comes back to after an exit (node 0's own, non-resumable) tells later only a node that reset
// its connection: one that gave the server up and asks again (issue 53: a one-way cut into a node ended the others
// with "connection closed (reset)" and the cut node with 74; a separate ddprun-rendezvous told it).
void closed_node_lost(RendezvousState& state, ConnId conn, const std::string& why, bool reset, const Now& now,
                      Actions& out) {
  if (!state.config.resumable && !reset) return node_lost(state, conn, why, now, out);
  lost_and_maybe_told_later(state, conn, why, now, out);
}

// Any node of the stopped round that asks is told, not only the ones this server judged silent: a server that took
// the round over after its host's loss judged the missing ones "did not come back", and a node cut off with a
// minority etcd member that came back to it was refused ("closed") and named the refusal while every other node
// named the lost one (issue 53, the nemesis's seed 8). Only the waiting (telling_the_silent) is for the untold.
bool tell_the_silent(RendezvousState& state, const Hello& event, Actions& out) {
  const HelloMsg& hello = event.hello;
  // A resume claim of the stopped round, or a node that stopped its workers for this server's silence (its agent's
  // fence, agent/round_fence.hpp) and comes back saying the last round it ran: issue 53, the nemesis's seeds 8, 9
  // and 13, where such a node was refused as a stranger ("closed") and named the refusal.
  const int asked = hello.resume ? hello.resume->restart_count : hello.after_round.value_or(-1);
  const bool of_the_job = hello.resume ? asked == state.restart_count : asked >= 0 && asked <= state.restart_count;
  const bool ended = state.phase == Phase::kComplete || state.phase == Phase::kStopped;
  if (!ended || !of_the_job) return false;
  const int rank = hello.resume ? hello.resume->node_rank : -1;
  const std::string who = rank >= 0 ? "node " + std::to_string(rank) + " (host \"" + hello.host + "\")"
                                    : "host \"" + hello.host + "\" (round " + std::to_string(asked) + ")";
  if (state.phase == Phase::kComplete && !hello.resume) {
    out.push_back(Send{event.conn, ErrorMsg{ErrorKind::kLostServer, "this node was cut off from the job, which "
                                                                    "completed without it"}});
  } else if (state.root_cause) {
    state.untold_silent.erase(rank);
    out.push_back(Send{event.conn, StopMsg{*state.root_cause, "the job stopped while this node was cut off", false,
                                           false, false}});
  } else {
    return false;
  }
  out.push_back(Close{event.conn});
  out.push_back(Log{LogLevel::kInfo, who + ", lost for its silence, came back and was told how the job ended"});
  return true;
}

bool keep_place_of_silent(RendezvousState& state, ConnId conn, bool after_stall, const Now& now, Actions& out) {
  if (!round_runs(state)) return false;
  auto it = state.nodes.find(conn);
  if (it == state.nodes.end()) return false;
  NodeEntry& node = it->second;
  const auto silent_for = std::chrono::duration_cast<std::chrono::milliseconds>(now.steady - node.last_seen);
  const bool standalone = state.config.resumable && state.config.reconnect_grace.count() > 0;
  const bool silent = state.cut_off_since || now.steady - node.last_seen >= common_silence(state.config);
  if (after_stall) {
    node.reclaimable_until = std::max(node.reclaimable_until, now.steady + state.config.heartbeat_timeout);
    // Not heard meanwhile, it is judged at its deadline: this server's stop was no time to hear it.
    node.last_seen = std::max(node.last_seen, now.steady);
    state.deadlines.emplace_back(now.steady + state.config.heartbeat_timeout, conn);
  } else if (standalone && silent) {
    node.reclaimable_until = std::max(node.reclaimable_until, now.steady + state.config.reconnect_grace);
  } else {
    return false;
  }
  out.push_back(Log{LogLevel::kInfo, "the connection of node " + std::to_string(node.node_rank) + " (host \"" +
                                         node.host + "\") closed " +
                                         (after_stall ? std::string("while this server was stopped")
                                                      : "after " + text::seconds(silent_for) + " of silence") +
                                         ": its place waits for its agent to reconnect"});
  return true;
}

bool reconnect_into_running(RendezvousState& state, const Hello& event, const Now& now, Actions& out) {
  const ResumeClaim& claim = *event.hello.resume;
  const auto rank = static_cast<std::size_t>(claim.node_rank);
  if (claim.restart_count != state.restart_count || rank >= state.by_rank.size() || state.by_rank[rank] == 0 ||
      claim.nnodes != static_cast<int>(state.by_rank.size()))
    return false;
  const ConnId old_conn = state.by_rank[rank];
  auto it = state.nodes.find(old_conn);
  if (it == state.nodes.end()) return false;
  const NodeEntry& old = it->second;
  // Its place must be silent, or have been in a silence of every node: a live node's place is never taken (an
  // insider's claim is a duplicate then).
  if (now.steady - old.last_seen < common_silence(state.config) && now.steady >= old.reclaimable_until) return false;
  if (old.rank_offset != claim.rank_offset || old.nproc != event.hello.nproc || old.host != event.hello.host)
    return false;
  // Only the agent that held the place: it alone knows the secret behind the place's seat commitment (issue 33:
  // a token holder naming the silent node's host and ranks was given its place). An old agent's place (no
  // commitment) is taken as before.
  if (!old.seat_commit.empty() && !seat_secret_matches(old.seat_commit, claim.seat_secret)) return false;
  NodeEntry node = std::move(it->second);
  state.nodes.erase(it);
  const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now.steady - node.last_seen);
  node.conn = event.conn;
  node.reclaimable_until = {};
  state.by_rank[rank] = event.conn;
  NodeEntry& stored = add_node(state, std::move(node));
  touch(state, stored, now);
  out.push_back(Close{old_conn});
  out.push_back(Log{LogLevel::kInfo, "node " + std::to_string(claim.node_rank) + " (host \"" + stored.host +
                                         "\") reconnected to round " + std::to_string(state.restart_count) +
                                         " after " + text::seconds(silent) + " of silence"});
  return true;
}

}  // namespace rules
}  // namespace ddprun::rendezvous
