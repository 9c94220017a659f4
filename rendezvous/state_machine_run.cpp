// The rules after joining: liveness, failures, completion, restart rounds, and the clock's deadlines.
#include <algorithm>
#include <sstream>

#include "common/counted.hpp"
#include "rendezvous/state_machine_rules.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous::rules {

namespace {

// The rendezvous timeout names at most this many nodes that joined and left (the latest).
constexpr std::size_t kDeparturesNamed = 8;

std::vector<ConnId> all_conns(const RendezvousState& state) {
  std::vector<ConnId> conns;
  conns.reserve(state.nodes.size());
  for (const auto& [conn, node] : state.nodes) conns.push_back(conn);
  std::sort(conns.begin(), conns.end());  // deterministic order for tests and logs
  return conns;
}

bool is_final(Phase phase) { return phase == Phase::kStopped || phase == Phase::kComplete; }

}  // namespace

// The connections of the nodes placed in the current round (a late joiner that waits is not one).
std::vector<ConnId> round_conns(const RendezvousState& state) {
  std::vector<ConnId> conns;
  conns.reserve(state.by_rank.size());
  for (ConnId conn : state.by_rank)
    if (conn != 0) conns.push_back(conn);
  std::sort(conns.begin(), conns.end());
  return conns;
}

namespace {

// Once every node of a re-forming round has stopped its workers, and every node dropped for its silence has
// stopped its own (fenced_until), the next round starts.
void start_next_round_if_stopped(RendezvousState& state, const Now& now, Actions& out) {
  if (state.phase != Phase::kRestarting || state.stopped_count < state.round_size) return;
  if (state.fenced_until && now.steady < *state.fenced_until) return;  // on_tick starts it then
  state.fenced_until.reset();
  ++state.restart_count;
  start_round(state, out);
}

// A node gone after the first round started: lost (connection closed, heartbeats missed, a bad report) or
// stopped (its ddprun got a signal; `failure` then carries it). It ends the job unless the job can re-form
// without it: dynamic node ranks, at least min_nodes left, and not the node hosting the server. The re-form
// uses no restart (departures are bounded per host by max_departures instead). Either way the node itself is
// told why before its connection closes (a node whose connection already closed hears nothing, harmlessly): a
// node dropped for silence may only have been paused.
void node_gone(RendezvousState& state, NodeEntry node, Failure failure, bool stopped, const Now& now, Actions& out) {
  state.joined_procs -= node.nproc;
  const int left = static_cast<int>(state.nodes.size());
  const JobConfig& config = state.config;
  const std::string who = "node " + std::to_string(node.node_rank) + " (host \"" + node.host + "\")";
  const bool elastic = is_elastic(config);
  auto tell = [&](const std::string& reason, bool rejoin = false) {
    out.push_back(Send{node.conn, StopMsg{failure, reason, false, false, rejoin}});
    out.push_back(Close{node.conn});
  };
  const std::string how = stopped ? "left" : "was dropped (" + failure.message + ")";
  if (node.node_rank < 0) {  // a late joiner that was never placed: its place is just free again
    tell("this node " + how + " before it was placed in a round");
    out.push_back(Log{LogLevel::kWarning, "host \"" + node.host + "\" (" + node.address +
                                              ") left while waiting for the next round: " + describe(failure)});
    return;
  }
  // A node gone while MIN nodes remain is a membership change, like a join: it uses no restart (the budget is
  // for worker failures), so a flaky spare cannot end a healthy job; max_departures bounds how often one host
  // may do it (check_hello refuses it after that).
  if (!config.static_node_ranks) ++state.departures[node.host];
  if (config.static_node_ranks || left < config.min_nodes || node.hosts_server) {
    std::string reason = stopped ? "a node was stopped" : "a node was lost";
    if (elastic && node.hosts_server)
      reason += "; it hosts the rendezvous server, without which the job cannot re-form";
    else if (elastic && left < config.min_nodes)
      reason += "; " + std::to_string(left) + " node" + (left == 1 ? "" : "s") + " left, fewer than the " +
                std::to_string(config.min_nodes) + " that --nnodes " + std::to_string(config.min_nodes) + ":" +
                std::to_string(config.max_nodes) + " needs";
    tell("this node " + how + "; the job stops: " + reason);
    return stop_job(state, std::move(failure), reason, out);
  }
  // Re-form without it: its slot empties now, the gap closes when the next round starts.
  state.by_rank[static_cast<std::size_t>(node.node_rank)] = 0;
  --state.round_size;
  if (node.stopped) --state.stopped_count;
  if (node.done) --state.done_count;
  // A node dropped for silence (not one that left on a signal) may come back as a new node once its stale
  // workers are gone: a node that was only paused (SIGSTOP, a frozen VM) rejoins by itself (agent side:
  // node_agent_rdzv.cpp on_stop). max_departures bounds how often one host may do that.
  tell("this node " + how + "; the job re-forms without it", /*rejoin=*/!stopped);
  if (state.phase == Phase::kRestarting) {
    out.push_back(Log{LogLevel::kWarning, who + " left while the job re-formed (" + describe(failure) + "); " +
                                              counted(left, "node") + (left == 1 ? " goes on" : " go on")});
    return start_next_round_if_stopped(state, now, out);
  }
  std::string reason = "re-forming the job without " + who + ": " + counted(left, "node") +
                       " left (a node gone while --nnodes MIN remain: no restart used)";
  // membership stays false: on the wire it means "a node joined"; this is a loss, told with its cause.
  begin_reform(state, std::move(failure), reason, /*membership=*/false, out);
  start_next_round_if_stopped(state, now, out);  // nobody of the round left to stop: newcomers only
}

}  // namespace

// A node gone (connection closed or heartbeats missed). Before the round starts it only frees its place.
void node_lost(RendezvousState& state, ConnId conn, const std::string& why, const Now& now, Actions& out) {
  auto it = state.nodes.find(conn);
  if (it == state.nodes.end()) return;
  NodeEntry node = std::move(it->second);
  state.nodes.erase(it);
  if (state.phase == Phase::kJoining) {
    // Its place is free for a replacement; a node that was only paused learns why when it wakes up.
    out.push_back(Send{conn, ErrorMsg{ErrorKind::kLostServer, "the rendezvous server dropped this node: " + why}});
    out.push_back(Close{conn});
    state.joined_procs -= node.nproc;
    if (state.config.static_node_ranks || state.adopting) state.by_rank[static_cast<std::size_t>(node.node_rank)] = 0;
    if (state.adopting) state.adopting->nprocs[static_cast<std::size_t>(node.node_rank)] = 0;
    if (state.adopting && state.nodes.empty()) state.adopting.reset();  // nobody left to take the round back from
    if (static_cast<int>(state.nodes.size()) < state.config.min_nodes) state.last_call_deadline.reset();
    if (state.config.join_grace.count() > 0) state.join_grace_deadline = now.steady + state.config.join_grace;
    out.push_back(Log{LogLevel::kWarning, "node from host \"" + node.host + "\" (" + node.address +
                                              ") left before the rendezvous completed: " + why});
    const bool silent = why.rfind("missed heartbeats", 0) == 0;
    const int rank = state.config.static_node_ranks ? node.node_rank : -1;
    state.left_while_joining.push_back(RendezvousState::Departure{
        rank, node.host,
        (rank >= 0 ? "node " + std::to_string(rank) : std::string("a node")) + " (host \"" + node.host + "\", " +
            node.address + ") joined, then " + (silent ? "went silent" : "left") + " (" + why + ")"});
    if (state.left_while_joining.size() > kDeparturesNamed) state.left_while_joining.pop_front();
    return;
  }
  if (is_final(state.phase)) return out.push_back(Close{conn});
  Failure failure;
  failure.kind = FailureKind::kNodeLost;
  failure.node_rank = node.node_rank;
  failure.host = node.host;
  failure.time_unix_ms = now.unix_ms;
  failure.message = why;
  node_gone(state, std::move(node), std::move(failure), /*stopped=*/false, now, out);
}

namespace {

std::string missing_nodes(const RendezvousState& state) {
  std::ostringstream out;
  int joined = static_cast<int>(state.nodes.size());
  out << joined << " of " << state.config.max_nodes << " nodes joined";
  if (state.config.static_node_ranks) {
    out << "; missing node ranks";
    int listed = 0;
    for (std::size_t rank = 0; rank < state.by_rank.size(); ++rank) {
      if (state.by_rank[rank] != 0) continue;
      if (++listed > 32) { out << " ..."; break; }
      out << (listed == 1 ? " " : ", ") << rank;
    }
  } else {
    out << " (need " << state.config.min_nodes << "); joined hosts:";
    int listed = 0;
    for (ConnId conn : all_conns(state)) {
      if (++listed > 32) { out << " ..."; break; }
      out << (listed == 1 ? " " : ", ") << state.nodes.at(conn).host;
    }
    if (joined == 0) out << " none";
  }
  // Those that were here: a partition during the rendezvous reads differently from a node never started.
  for (const RendezvousState::Departure& d : state.left_while_joining) {
    const bool back = d.node_rank >= 0 ? state.by_rank[static_cast<std::size_t>(d.node_rank)] != 0
                                       : std::any_of(state.nodes.begin(), state.nodes.end(),
                                                     [&](const auto& e) { return e.second.host == d.host; });
    if (!back) out << "; " << d.text;
  }
  return out.str();
}

// Every node is told `why` (a timeout: exit 75) and the server stops: the round can no longer form.
void end_rendezvous(RendezvousState& state, const std::string& why, Actions& out) {
  out.push_back(Log{LogLevel::kError, why});
  for (ConnId conn : all_conns(state)) {
    out.push_back(Send{conn, ErrorMsg{ErrorKind::kTimeout, why}});
    out.push_back(Close{conn});
  }
  state.nodes.clear();
  state.deadlines.clear();
  state.join_grace_deadline.reset();
  state.phase = Phase::kStopped;
}

}  // namespace

// "" if a worker failure's ranks fit this node's place in the round, else why not. The decoder already
// bounded them; only the state machine knows the node's rank offset and worker count.
std::string check_ranks(const RendezvousState& state, const NodeEntry& node, const Failure& failure) {
  if (failure.is_node_failure() || node.node_rank < 0) return {};
  long long offset = std::max(node.rank_offset, 0);  // set when the node was placed: no walk over the job
  if (node.rank_offset < 0)
    for (int r = 0; r < node.node_rank; ++r) offset += state.nodes.at(state.by_rank[static_cast<std::size_t>(r)]).nproc;
  if (failure.local_rank >= node.nproc)
    return "local rank " + std::to_string(failure.local_rank) + " but the node runs " + std::to_string(node.nproc) +
           " workers";
  if (failure.rank != offset + failure.local_rank)
    return "rank " + std::to_string(failure.rank) + " is not rank offset " + std::to_string(offset) +
           " + local rank " + std::to_string(failure.local_rank);
  return {};
}

void touch(RendezvousState& state, NodeEntry& node, const Now& now) {
  node.last_seen = now.steady;
  state.deadlines.emplace_back(now.steady + state.config.heartbeat_timeout, node.conn);
}

void stop_job(RendezvousState& state, Failure root_cause, const std::string& reason, Actions& out) {
  state.phase = Phase::kStopped;
  state.root_cause = root_cause;
  state.deadlines.clear();  // final: nobody's silence matters any more
  // A node's ddprun told to stop (scancel, preemption, Ctrl-C) is no error: the job may yet end preempted.
  const bool stopped = is_agent_stopped(root_cause);
  out.push_back(Log{stopped ? LogLevel::kWarning : LogLevel::kError,
                    "stopping the job (" + reason + "); root cause: " + describe(root_cause)});
  out.push_back(Broadcast{all_conns(state), StopMsg{std::move(root_cause), reason, false}});
}

void begin_reform(RendezvousState& state, Failure cause, const std::string& reason, bool membership, Actions& out) {
  state.phase = Phase::kRestarting;
  out.push_back(Log{LogLevel::kWarning, membership ? reason : reason + " after: " + describe(cause)});
  if (!membership) state.root_cause = cause;
  StopMsg stop{std::move(cause), reason, true, membership};
  out.push_back(Broadcast{round_conns(state), std::move(stop)});
}

void on_heartbeat(RendezvousState& state, const Heartbeat& event, const Now& now, Actions& out) {
  auto it = state.nodes.find(event.conn);
  if (it == state.nodes.end()) return;
  if (!is_final(state.phase)) touch(state, it->second, now);
  out.push_back(Send{event.conn, HeartbeatAckMsg{}});
}

void on_failure(RendezvousState& state, const FailureReport& event, const Now& now, Actions& out) {
  auto it = state.nodes.find(event.conn);
  if (it == state.nodes.end()) return;
  NodeEntry& node = it->second;
  Failure failure = event.failure;
  failure.node_rank = node.node_rank;  // the server's word on which node this is, not the report's
  if (failure.host.empty()) failure.host = node.host;
  // During a restart round the workers' failures are the round's teardown victims; a node failure (its
  // ddprun was stopped by a signal while the round went down) is a node gone (node_gone).
  if ((state.phase == Phase::kRestarting && !failure.is_node_failure()) || is_final(state.phase)) {
    out.push_back(Log{LogLevel::kDebug, "ignoring a later failure (teardown victim): " + describe(failure)});
    return;
  }
  if (hold_while_adopting(state, event.conn, event.failure, now)) return;
  if (std::string why = check_ranks(state, node, failure); !why.empty())
    return node_lost(state, event.conn, "its agent sent an invalid failure report (" + why + ")", now, out);
  touch(state, node, now);
  if (state.phase != Phase::kJoining && (failure.is_node_failure() || node.node_rank < 0)) {
    // Its ddprun was stopped by a signal (a late joiner that waits runs no worker, so nothing else of it can
    // fail): like a lost node, the job re-forms without it when it can.
    NodeEntry gone = std::move(node);
    state.nodes.erase(it);
    return node_gone(state, std::move(gone), std::move(failure), /*stopped=*/true, now, out);
  }
  worker_failed(state, std::move(failure), out);
}

void worker_failed(RendezvousState& state, Failure failure, Actions& out) {
  if (state.phase == Phase::kRunning && state.failure_restarts < state.config.max_restarts && !failure.is_node_failure()) {
    ++state.failure_restarts;
    std::string reason = "restarting the job (restart " + std::to_string(state.failure_restarts) + " of " +
                         std::to_string(state.config.max_restarts) + ")";
    return begin_reform(state, std::move(failure), reason, /*membership=*/false, out);
  }
  const char* why = state.phase == Phase::kJoining ? "a node failed before the rendezvous completed"
                                                   : "a worker failed";
  stop_job(state, std::move(failure), why, out);
}

void on_node_done(RendezvousState& state, const NodeDone& event, const Now& now, Actions& out) {
  // Recorded before a hold (a round being taken back replays the done without it): a notice that reached
  // running workers of the job counts for the job wherever it came.
  if (event.noticed && !is_final(state.phase) && state.nodes.count(event.conn)) state.noticed = true;
  if (hold_while_adopting(state, event.conn, std::nullopt, now)) return;
  auto it = state.nodes.find(event.conn);
  // A late joiner that waits runs no worker: its word does not count.
  if (it == state.nodes.end() || state.phase != Phase::kRunning || it->second.done || it->second.node_rank < 0) return;
  touch(state, it->second, now);
  it->second.done = true;
  if (++state.done_count < state.round_size) return;
  state.phase = Phase::kComplete;
  state.deadlines.clear();
  out.push_back(Log{LogLevel::kInfo, state.done_count == 1 ? std::string("job complete: every worker of its one node exited 0")
                                                           : "job complete: every worker on all " +
                                                                 std::to_string(state.done_count) + " nodes exited 0"});
  if (state.noticed) out.push_back(Log{LogLevel::kInfo, "a scheduler's notice reached running workers first: "
                                                         "every node ends the job as preempted"});
  out.push_back(Broadcast{all_conns(state), CompleteMsg{state.noticed}});
}

void on_node_stopped(RendezvousState& state, const NodeStopped& event, const Now& now, Actions& out) {
  auto it = state.nodes.find(event.conn);
  if (it == state.nodes.end() || state.phase != Phase::kRestarting || it->second.stopped ||
      it->second.node_rank < 0)
    return;
  touch(state, it->second, now);
  it->second.stopped = true;
  if (event.master_port > 0) it->second.master_port = event.master_port;  // node 0's offer for the next round
  ++state.stopped_count;
  start_next_round_if_stopped(state, now, out);
}

// A re-form keeps the workers of some nodes in place while others start new ones (a joiner, a node whose
// workers could not stay). The kept ones would wait in the new group for the new ones' interpreter and
// imports (seconds: the whole job stalls); instead they train on in the old round until every node says its
// workers can meet (kept ones at once, new ones once past their imports), and then all are told at once. A
// word for another round (sent before this one started) does not count.
void on_round_ready(RendezvousState& state, const RoundReady& event, const Now& now, Actions& out) {
  auto it = state.nodes.find(event.conn);
  if (it == state.nodes.end() || state.phase != Phase::kRunning || it->second.ready || it->second.node_rank < 0 ||
      event.round != state.restart_count)
    return;
  touch(state, it->second, now);
  it->second.ready = true;
  if (++state.ready_count == state.round_size)
    out.push_back(Broadcast{round_conns(state), MeetMsg{state.restart_count}});
}

void on_disconnected(RendezvousState& state, const Disconnected& event, const Now& now, Actions& out) {
  if (keep_place_of_silent(state, event.conn, event.after_stall, now, out)) return;
  closed_node_lost(state, event.conn,
                   "connection closed" + (event.reason.empty() ? "" : " (" + event.reason + ")"), event.reset, now,
                   out);
}

void on_tick(RendezvousState& state, const Now& now, Actions& out) {
  if (state.phase == Phase::kJoining && now.steady >= state.started + state.config.join_timeout)
    return end_rendezvous(state, "rendezvous timed out after " + text::seconds(state.config.join_timeout) + ": " +
                                     missing_nodes(state), out);
  if (state.phase == Phase::kJoining && state.join_grace_deadline && now.steady >= *state.join_grace_deadline)
    return end_rendezvous(state, "rendezvous ended: no node joined or left for " +
                                     text::seconds(state.config.join_grace) +
                                     " (--join-grace: every node starts together, none can be replaced): " +
                                     missing_nodes(state), out);
  if (state.phase == Phase::kJoining && state.last_call_deadline && now.steady >= *state.last_call_deadline)
    start_round(state, out);
  // Before the nodes' own deadlines: a node that resumed first and went silent since is the adoption's concern.
  check_adoption_deadline(state, now, out);
  check_cut_off(state, now, out);
  while (!state.deadlines.empty() && state.deadlines.front().first <= now.steady) {
    auto [deadline, conn] = state.deadlines.front();
    state.deadlines.pop_front();
    auto it = state.nodes.find(conn);
    // Stale: the node was heard from after this deadline was set, and a later one is queued.
    if (it == state.nodes.end() || it->second.last_seen + state.config.heartbeat_timeout > deadline) continue;
    if (now.steady < it->second.spared_until) continue;  // a later deadline is queued for it
    if (suspect_own_link(state, conn, now, out)) continue;
    silent_node_lost(state, conn, "missed heartbeats for " + text::seconds(state.config.heartbeat_timeout), now, out);
  }
  judge_round_while_lapsing(state, now, out);
  check_hang_deadline(state, now, out);
  if (state.fenced_until && now.steady >= *state.fenced_until) start_next_round_if_stopped(state, now, out);
  admit_waiting_joiners(state, now, out);  // join_min_interval passed
}

}  // namespace ddprun::rendezvous::rules
