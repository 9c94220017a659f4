// step() dispatch and the joining rules: who may join, and how a round starts.
#include "rendezvous/state_machine.hpp"

#include <algorithm>
#include <tuple>

#include "common/counted.hpp"
#include "common/error.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/state_machine_rules.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kJoining: return "joining";
    case Phase::kRunning: return "running";
    case Phase::kRestarting: return "restarting";
    case Phase::kStopped: return "stopped";
    case Phase::kComplete: return "complete";
  }
  return "?";
}

RendezvousState::RendezvousState(JobConfig job, Clock::time_point started_at)
    : config(std::move(job)), started(started_at) {
  by_rank.assign(config.static_node_ranks ? static_cast<std::size_t>(config.max_nodes) : 0, 0);
}

std::vector<Action> step(RendezvousState& state, const Event& event, const Now& now) {
  std::vector<Action> out;
  const Phase phase_before = state.phase;
  const int restarts_before = state.restart_count;
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, Hello>) rules::on_hello(state, e, now, out);
        else if constexpr (std::is_same_v<T, Heartbeat>) rules::on_heartbeat(state, e, now, out);
        else if constexpr (std::is_same_v<T, FailureReport>) rules::on_failure(state, e, now, out);
        else if constexpr (std::is_same_v<T, NodeDone>) rules::on_node_done(state, e, now, out);
        else if constexpr (std::is_same_v<T, NodeStopped>) rules::on_node_stopped(state, e, now, out);
        else if constexpr (std::is_same_v<T, Disconnected>) rules::on_disconnected(state, e, now, out);
        else if constexpr (std::is_same_v<T, HangReport>) rules::on_hang_report(state, e, now, out);
        else if constexpr (std::is_same_v<T, CannotStart>) rules::on_cannot_start(state, e, out);
        else if constexpr (std::is_same_v<T, RoundReady>) rules::on_round_ready(state, e, now, out);
        else if constexpr (std::is_same_v<T, LeaseStanding>) rules::on_lease_standing(state, e, now, out);
        else rules::on_tick(state, now, out);
      },
      event);
  if (state.phase != Phase::kRunning) state.hang.reset();  // stopped or re-forming: nothing left to judge
  // A round started (the first, or a re-formed one): join_min_interval counts from here.
  if (state.phase == Phase::kRunning && (phase_before != Phase::kRunning || state.restart_count != restarts_before))
    state.round_started = now.steady;
  return out;
}

std::optional<Clock::time_point> next_deadline(const RendezvousState& state) {
  std::optional<Clock::time_point> next;
  auto consider = [&next](Clock::time_point t) { if (!next || t < *next) next = t; };
  if (state.phase == Phase::kJoining) {
    consider(state.started + state.config.join_timeout);
    if (state.last_call_deadline) consider(*state.last_call_deadline);
    if (state.join_grace_deadline) consider(*state.join_grace_deadline);
  }
  if (!state.deadlines.empty()) consider(state.deadlines.front().first);
  if (state.hang) consider(state.hang->deadline);
  if (auto joiners = rules::joiners_reform_at(state)) consider(*joiners);
  if (state.adopting) consider(state.adopting->deadline);
  if (state.cut_off_since) consider(*state.cut_off_since + state.config.reconnect_grace);
  if (state.phase == Phase::kRestarting && state.fenced_until) consider(*state.fenced_until);
  if (auto lapse = rules::lapse_deadline(state)) consider(*lapse);
  return next;
}

namespace rules {

namespace {

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "::1" || address == "localhost";
}

}  // namespace

constexpr const char* kAuthFailed =
    "authentication failed: wrong job token or run id (check --rdzv-id, and --rdzv-token-file / DDPRUN_TOKEN / "
    "--rdzv-token)";
// With MUNGE the same answer covers a wrong user too: a stranger cannot tell which of the three failed.
constexpr const char* kAuthFailedMunge =
    "authentication failed: wrong job token or run id, or not the job's user (this job requires a MUNGE "
    "credential of the user the job runs as; check --rdzv-id, the token, and that every node runs as that user)";

}  // namespace rules

std::string auth_failed_message(const JobConfig& config) {
  return config.require_munge ? rules::kAuthFailedMunge : rules::kAuthFailed;
}

namespace rules {

void refuse(ConnId conn, const std::string& why, const Hello& event, const RendezvousState& state, Actions& out) {
  out.push_back(Send{conn, ErrorMsg{ErrorKind::kRefused, why}});
  out.push_back(Close{conn});
  // Our own log may say which was wrong (run id, token, MUNGE): the operator, not the peer, reads it.
  std::string detail;
  if (why == kAuthFailed || why == kAuthFailedMunge) {
    if (event.hello.run_id != state.config.run_id)
      detail = " (its run id \"" + event.hello.run_id + "\" is not this run's)";
    else if (!verify_mac(state.config.token, event.nonce, state.config.run_id, event.hello.mac))
      detail = " (its run id matches: wrong token)";
    else
      detail = " (" + event.munge_problem + ")";
  }
  out.push_back(Log{LogLevel::kWarning, "refused node from " + event.peer_address + " (host \"" +
                                            event.hello.host + "\"): " + why + detail});
}

std::string check_auth(const RendezvousState& state, const Hello& event) {
  const HelloMsg& hello = event.hello;
  const JobConfig& config = state.config;
  if (hello.version != kProtocolVersion)
    return "protocol version mismatch: the rendezvous server speaks v" + std::to_string(kProtocolVersion) +
           ", this agent v" + std::to_string(hello.version) + " (use the same ddprun on every node)";
  // No run-id oracle: the MAC binds the run id, so a wrong run id and a wrong token fail the same check and
  // get the same answer, computed the same way; nothing before it depends on the run id. An unauthenticated
  // peer learns only that its (run id, token) pair is not this job's.
  const bool mac_ok = verify_mac(config.token, event.nonce, config.run_id, hello.mac) && hello.run_id == config.run_id;
  if (config.require_munge && (!mac_ok || !event.munge_ok)) return std::string(kAuthFailedMunge);
  if (!mac_ok) return std::string(kAuthFailed);
  return {};
}

std::string closed_message(const RendezvousState& state) {
  return std::string("the rendezvous of run \"") + state.config.run_id + "\" is closed (job " +
         to_string(state.phase) + "); this node is not part of it";
}

namespace {

// Every check a hello must pass; returns the reason for refusing, or "" to accept.
std::string check_hello(const RendezvousState& state, const Hello& event) {
  const HelloMsg& hello = event.hello;
  const JobConfig& config = state.config;
  if (std::string why = check_auth(state, event); !why.empty()) return why;
  if (state.phase == Phase::kComplete || state.phase == Phase::kStopped) return closed_message(state);
  if (state.phase != Phase::kJoining && !is_elastic(config)) return closed_message(state);
  // A restarted server gathers the round its nodes still run (state_machine_resume.cpp): no new round yet.
  if (state.adopting)
    return "the rendezvous server restarted and is taking back round " +
           std::to_string(state.adopting->claim.restart_count) +
           " from the nodes that run it; a new node cannot join it now (an elastic job admits one once the "
           "round runs again: start this node again then)";
  if (state.phase != Phase::kJoining && static_cast<int>(state.nodes.size()) >= config.max_nodes)
    return "the job already has " + std::to_string(config.max_nodes) + " nodes, the most --nnodes " +
           std::to_string(config.min_nodes) + ":" + std::to_string(config.max_nodes) + " allows";
  if (hello.nproc < 1) return "a node must run at least one worker (nproc >= 1)";
  if (auto it = state.departures.find(hello.host); it != state.departures.end() && it->second >= config.max_departures)
    return "host \"" + hello.host + "\" left this job " + std::to_string(it->second) +
           " times: it is not admitted again (a flapping node re-forms the job over and over); repair it, or "
           "start a new job";
  // Ranks and the world size are ints everywhere (and in every worker's environment): keep the sum in range.
  if (state.joined_procs + hello.nproc > static_cast<std::int64_t>(kMaxRank) + 1)
    return "the world size would exceed " + std::to_string(kMaxRank + 1) + " workers";
  if (config.static_node_ranks) {
    if (!hello.node_rank) return "this job uses static node ranks: pass --node-rank";
    int rank = *hello.node_rank;
    if (rank < 0 || rank >= config.max_nodes)
      return "node rank " + std::to_string(rank) + " is out of range: --nnodes " + std::to_string(config.max_nodes) +
             " allows 0.." + std::to_string(config.max_nodes - 1);
    if (ConnId holder = state.by_rank[static_cast<std::size_t>(rank)]) {
      const NodeEntry& other = state.nodes.at(holder);
      return "duplicate node rank " + std::to_string(rank) + ": already taken by host \"" + other.host + "\" (" +
             other.address + ")";
    }
    if (rank == 0 && hello.master_port <= 0) return "node rank 0 must supply a master port";
  } else {
    if (hello.node_rank)
      return "this job assigns node ranks dynamically (--rdzv-endpoint); do not pass --node-rank";
    if (static_cast<int>(state.nodes.size()) >= config.max_nodes)
      return "the rendezvous is full: " + std::to_string(config.max_nodes) + " nodes have already joined";
    if (hello.master_port <= 0) return "a node must supply a master port candidate";
  }
  return {};
}

// While the rendezvous gathers, a node of the same host that has been silent for half a heartbeat timeout is this
// node's own abandoned connection (it gave this server up on a lossy link and connected again, and its reset was
// lost): its place goes to the new hello instead of a "duplicate node rank" refusal (static ranks) or a ghost
// node that the round would count (dynamic). A live agent beats every interval: two agents of one host that both
// beat are never taken for one. Its seat commitment must be the old connection's: another agent of the job that
// names the same host (an insider can name any) has its own, and joins beside it instead (issue 33).
//
// While a round runs, an elastic job's node whose agent stopped its workers for this server's silence (the fence,
// agent/round_fence.hpp) joins again as a new node, saying the last round it ran (after_round), with the seat it held
// (the agent keeps its seat secret across its clients): its old place is its own, stale whatever this server last
// heard on it (a one-way cut into the node lets its frames through), and goes now. Before, the old place still
// counted and the hello was refused ("the job already has 3 nodes"; issue 53, the nemesis with default heartbeats,
// seed 11: the node exited 77 naming the refusal).
void replace_silent_self(RendezvousState& state, const Hello& event, const Now& now, Actions& out) {
  const bool fenced_rejoin = event.hello.after_round && !event.hello.seat.empty() && is_elastic(state.config) &&
                             (state.phase == Phase::kRunning || state.phase == Phase::kRestarting);
  if (state.phase != Phase::kJoining && !fenced_rejoin) return;
  const auto silent_since = now.steady - state.config.heartbeat_timeout / 2;
  auto is_self = [&](const NodeEntry& node) {
    return node.host == event.hello.host && node.seat_commit == event.hello.seat &&
           (fenced_rejoin || node.last_seen <= silent_since);
  };
  ConnId stale = 0;
  if (state.config.static_node_ranks) {  // the holder of the rank it claims
    const auto rank = event.hello.node_rank;
    if (!rank || *rank < 0 || *rank >= static_cast<int>(state.by_rank.size())) return;
    const ConnId holder = state.by_rank[static_cast<std::size_t>(*rank)];
    if (holder != 0 && is_self(state.nodes.at(holder))) stale = holder;
  } else {  // the nodes of its host, by the index: a scan of every node per hello made a 10k-node join O(n²)
    auto [it, end] = state.by_host.equal_range(event.hello.host);
    while (it != end) {
      const auto node = state.nodes.find(it->second);
      if (node == state.nodes.end() || node->second.host != it->first) {
        it = state.by_host.erase(it);  // a node gone since
        continue;
      }
      if (is_self(node->second)) stale = node->first;
      ++it;
    }
  }
  if (stale == 0) return;
  rules::node_lost(state, stale,
                   fenced_rejoin ? "its agent stopped its workers when this server fell silent to it, and joins again"
                                 : "replaced by a new connection from the same host (the old one fell silent)",
                   now, out);
}

}  // namespace

NodeEntry new_node(RendezvousState& state, const Hello& event) {
  const HelloMsg& hello = event.hello;
  NodeEntry node;
  node.conn = event.conn;
  node.nproc = hello.nproc;
  state.joined_procs += hello.nproc;
  node.host = hello.host;
  // From this very machine: over loopback, or to one of its own addresses (a dual-stack node 0 whose name resolves
  // to its IPv6 address first reaches its own server over IPv6 while the others, whose IPv6 path may be broken,
  // came over IPv4: issue 53 gave the workers MASTER_ADDR as that IPv6 address, and gloo could not connect).
  const bool same_machine = is_loopback(event.peer_address) ||
                            (!event.peer_address.empty() && event.peer_address == event.local_address);
  node.loopback = hello.address.empty() && same_machine;
  node.address = hello.address.empty() ? event.peer_address : hello.address;
  node.master_port = hello.master_port;
  node.hosts_server = hello.hosts_server;
  node.seat_commit = hello.seat;
  node.join_seq = state.next_join_seq++;
  // The address the other machines reached this server at (never what this machine's own agent used).
  if (!same_machine && !is_loopback(event.local_address) && !event.local_address.empty())
    state.server_address = event.local_address;
  return node;
}

NodeEntry& add_node(RendezvousState& state, NodeEntry node) {
  if (state.by_host.size() >= 2 * state.nodes.size() + 64) {  // mostly nodes gone: rebuilt, so it stays O(nodes)
    state.by_host.clear();
    for (const auto& [conn, kept] : state.nodes) state.by_host.emplace(kept.host, conn);
  }
  state.by_host.emplace(node.host, node.conn);
  return state.nodes.emplace(node.conn, std::move(node)).first->second;
}

void on_hello(RendezvousState& state, const Hello& event, const Now& now, Actions& out) {
  if (state.nodes.count(event.conn)) {  // a second hello is a protocol violation, not a rejoin
    out.push_back(Close{event.conn});
    return;
  }
  if (on_start_failure_hello(state, event, now, out)) return;
  if (event.hello.resume) return on_resume_hello(state, event, now, out);  // state_machine_resume.cpp
  replace_silent_self(state, event, now, out);
  if (event.hello.after_round && check_auth(state, event).empty() && tell_the_silent(state, event, out)) return;
  if (std::string why = check_hello(state, event); !why.empty()) return refuse(event.conn, why, event, state, out);

  const HelloMsg& hello = event.hello;
  NodeEntry node = new_node(state, event);
  if (hello.node_rank) {
    node.node_rank = *hello.node_rank;
    state.by_rank[static_cast<std::size_t>(node.node_rank)] = event.conn;
  }
  NodeEntry& stored = add_node(state, std::move(node));
  touch(state, stored, now);
  // A node back from a server lost during a re-form (client_reconnect.hpp): the round gathered here goes on
  // with the job's numbering (TORCHELASTIC_RESTART_COUNT), and counts the rounds before it as restarts used,
  // as a round taken back does (state_machine_resume.cpp: what a node cannot tell is assumed).
  if (hello.after_round && state.phase == Phase::kJoining && *hello.after_round >= state.restart_count) {
    state.restart_count = *hello.after_round + 1;
    state.failure_restarts = std::min(state.restart_count, state.config.max_restarts);
    out.push_back(Log{LogLevel::kInfo, "host \"" + stored.host + "\" came back after round " +
                                           std::to_string(*hello.after_round) + " (its server was lost while the " +
                                           "job re-formed): the round gathered here is round " +
                                           std::to_string(state.restart_count)});
  }

  int joined = static_cast<int>(state.nodes.size());
  if (state.phase != Phase::kJoining) return admit_late_joiner(state, stored, now, out);
  out.push_back(Log{LogLevel::kDebug, "node joined: host \"" + stored.host + "\" (" + stored.address + "), " +
                                          std::to_string(joined) + " of " + std::to_string(state.config.max_nodes)});
  if (joined == state.config.max_nodes) return start_round(state, out);
  if (state.config.join_grace.count() > 0) state.join_grace_deadline = now.steady + state.config.join_grace;
  if (joined >= state.config.min_nodes && !state.last_call_deadline)
    state.last_call_deadline = now.steady + state.config.last_call;
}

// An elastic job's node that joined after the first round: it waits, unplaced, for the next round; any re-form
// places it. While every node of the round still works, config.join_policy says whether its arrival re-forms
// the job: `now` (torchrun restarts the worker group too, after its next monitor poll) once the round has run
// join_min_interval, `at_failure` never. The re-form uses no restart of max_restarts. Once a node reported
// done the job is finishing: the newcomer waits, and gets `complete` with the others if nothing re-forms the
// job first.
void admit_late_joiner(RendezvousState& state, const NodeEntry& node, const Now& now, Actions& out) {
  std::string why;
  if (state.phase == Phase::kRestarting) why = "the job is re-forming";
  else if (state.done_count > 0) why = "the job is finishing";
  else if (state.config.join_policy == JoinPolicy::kAtFailure)
    why = "join_policy at_failure: the job re-forms with it after a failure or a departure";
  else if (state.hang)
    why = "a hang inquiry is under way: the job re-forms with it once the verdict is in";
  else if (auto at = joiners_reform_at(state); at && now.steady < *at)
    why = "join_min_interval " + text::seconds(state.config.join_min_interval) + ": the round has run " +
          text::seconds(std::chrono::duration_cast<std::chrono::milliseconds>(now.steady - state.round_started));
  if (why.empty()) return admit_waiting_joiners(state, now, out);
  out.push_back(Log{LogLevel::kInfo, "node joined: host \"" + node.host + "\" (" + node.address +
                                         "); it waits for the next round (" + why + ")"});
}

std::optional<Clock::time_point> joiners_reform_at(const RendezvousState& state) {
  const bool waiting = static_cast<int>(state.nodes.size()) > state.round_size;  // nodes not placed
  // A hang inquiry under way is decided first (issue 32: a join re-formed the job and the hang was never judged,
  // no restart charged, its stacks never referenced); the joiners come in with the verdict's restart, or after a
  // deferral.
  if (state.phase != Phase::kRunning || !waiting || state.done_count > 0 ||
      state.config.join_policy != JoinPolicy::kNow || state.hang)
    return std::nullopt;
  return state.round_started + state.config.join_min_interval;
}

void admit_waiting_joiners(RendezvousState& state, const Now& now, Actions& out) {
  auto at = joiners_reform_at(state);
  if (!at || now.steady < *at) return;
  const NodeEntry* first = nullptr;  // the earliest joiner names them all
  int joiners = 0;
  for (const auto& [conn, node] : state.nodes) {
    if (node.node_rank >= 0) continue;
    ++joiners;
    if (!first || node.join_seq < first->join_seq) first = &node;
  }
  Failure joined;  // no failure: names the newcomer for the agents' logs
  joined.kind = FailureKind::kJoined;
  joined.host = first->host;
  joined.message = kJoinedMessage;
  std::string who = "host \"" + first->host + "\" (" + first->address + ")" +
                    (joiners > 1 ? " and " + std::to_string(joiners - 1) + " more" : "");
  begin_reform(state, std::move(joined),
               "re-forming the job: " + who + " joined, " + std::to_string(state.nodes.size()) +
                   " nodes in the next round (a membership change: no restart used)",
               /*membership=*/true, out);
}

void start_round(RendezvousState& state, Actions& out) {
  if (!state.config.static_node_ranks) {
    // Dynamic ranks: the first round sorts the nodes; later rounds keep the order of the nodes that stay
    // (so node 0, the master, stays where it was unless it left) and append the newcomers, sorted the same
    // way. Ranks stay contiguous: the gaps of nodes gone during a re-form close.
    std::vector<ConnId> kept;
    kept.reserve(state.nodes.size());
    for (ConnId conn : state.by_rank)
      if (conn != 0) kept.push_back(conn);
    std::vector<const NodeEntry*> newcomers;
    for (const auto& [conn, node] : state.nodes)
      if (node.node_rank < 0) newcomers.push_back(&node);
    std::sort(newcomers.begin(), newcomers.end(), [](const NodeEntry* a, const NodeEntry* b) {
      return std::tie(a->host, a->address, a->join_seq) < std::tie(b->host, b->address, b->join_seq);
    });
    for (const NodeEntry* node : newcomers) kept.push_back(node->conn);
    state.by_rank = std::move(kept);
    for (std::size_t rank = 0; rank < state.by_rank.size(); ++rank)
      state.nodes.at(state.by_rank[rank]).node_rank = static_cast<int>(rank);
  }
  std::vector<int> nprocs;
  nprocs.reserve(state.by_rank.size());
  for (ConnId conn : state.by_rank) nprocs.push_back(state.nodes.at(conn).nproc);
  const NodeEntry& node0 = state.nodes.at(state.by_rank.front());
  // A node that reached us over loopback runs on our machine: the others reach it at our address.
  std::string master_addr = node0.loopback && !state.server_address.empty() ? state.server_address : node0.address;

  SendAssignments send{make_round(nprocs, master_addr, node0.master_port, state.config.run_id,
                                  state.restart_count, state.config.max_restarts),
                       {}};
  send.slots.reserve(state.by_rank.size());
  int offset = 0;
  for (std::size_t rank = 0; rank < state.by_rank.size(); ++rank) {
    send.slots.push_back(Slot{state.by_rank[rank], static_cast<int>(rank), offset});
    state.nodes.at(state.by_rank[rank]).rank_offset = offset;
    offset += nprocs[rank];
  }
  for (auto& [conn, node] : state.nodes) node.done = node.stopped = node.ready = false;
  state.done_count = state.stopped_count = state.ready_count = 0;
  state.round_size = static_cast<int>(state.by_rank.size());
  state.phase = Phase::kRunning;
  state.last_call_deadline.reset();
  state.join_grace_deadline.reset();
  out.push_back(Log{LogLevel::kInfo, "rendezvous complete: run \"" + state.config.run_id + "\", " +
                                         counted(send.round.nnodes, "node") + ", world size " +
                                         std::to_string(send.round.world_size) + ", master " + text::host_port(master_addr, node0.master_port) +
                                         ", restart " +
                                         std::to_string(state.restart_count)});
  ResumeClaim round;  // as its nodes would claim it after a restart of this server
  round.restart_count = state.restart_count;
  round.nnodes = send.round.nnodes;
  round.world_size = send.round.world_size;
  round.master_addr = master_addr;
  round.master_port = node0.master_port;
  round.fingerprint = nprocs_fingerprint(nprocs);
  out.push_back(std::move(send));
  remember_round(state, round, out);
}

}  // namespace rules
}  // namespace ddprun::rendezvous
