// Resume after a server restart (issue 19): a standalone server (ddprun-rendezvous) that died and was started
// again, with the same run id, token and --nnodes, takes back the round its agents still run.
//
// The workers do not need the server while they train, so an agent that loses a resumable server keeps them and
// reconnects (rendezvous/client_reconnect.cpp); its hello then claims its place: round R, node rank N of
// NNODES, rank offset, world size, MASTER_ADDR:PORT and a fingerprint of every node's worker count. The
// restarted server has no memory of the job; the claims are all it knows, so it trusts them only as far as
// they agree:
//  - The first claim opens the adoption (phase stays kJoining, `adopting` set, a deadline of one heartbeat
//    timeout: a live agent retries at least every second). Every later claim must name the same round (round,
//    node count, world size, master, fingerprint) and a node rank not yet back; otherwise it is refused with
//    both rounds named, and that agent ends as it would have without resuming. Plain hellos are refused
//    meanwhile (there is no round to join yet).
//  - Once every node of the round is back, the worker counts they brought must give the fingerprint, the world
//    size and every node's rank offset. Then the round runs (kRunning) exactly as if this server had assigned
//    it, and the reports the agents sent meanwhile (a failure, node_done) are replayed in arrival order.
//  - Not every node back by the deadline: those missing are lost nodes, with the usual consequence: a job of
//    fixed size stops with the first missing one as the root cause; an elastic one with MIN nodes back
//    re-forms without them.
//  - What the claims cannot say is assumed: failure restarts used = the round number, at most max_restarts
//    (exact for a job of fixed size, whose rounds are all failure restarts; an elastic job's joins were free,
//    so it may get fewer restarts than it had left); each host's departures start again from 0.
// A resume hello to a server whose round runs (it never restarted, or it already took the round back): a place
// silent since a cut takes the node back (state_machine_cut_off.cpp); else the node's rank there is taken (a
// duplicate), or it was dropped and the job went on without it; both refused.
#include <algorithm>

#include "common/counted.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/state_machine_rules.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous::rules {
namespace {

std::string round_text(const ResumeClaim& c) {
  return "round " + std::to_string(c.restart_count) + " (" + counted(c.nnodes, "node") + ", world size " +
         std::to_string(c.world_size) + ", master " + text::host_port(c.master_addr, c.master_port) + ")";
}

// "" when the claim fits this server's job; else why not.
std::string check_claim(const RendezvousState& state, const HelloMsg& hello) {
  const ResumeClaim& c = *hello.resume;
  const JobConfig& config = state.config;
  if (c.nnodes < config.min_nodes || c.nnodes > config.max_nodes)
    return "it ran with " + counted(c.nnodes, "node") + ", and this server runs --nnodes " +
           (config.min_nodes == config.max_nodes ? std::to_string(config.max_nodes)
                                                 : std::to_string(config.min_nodes) + ":" +
                                                       std::to_string(config.max_nodes));
  if (config.static_node_ranks && hello.node_rank != c.node_rank)
    return "its --node-rank is not the node rank " + std::to_string(c.node_rank) + " it claims";
  if (!config.static_node_ranks && hello.node_rank)
    return "this job assigns node ranks dynamically (--rdzv-endpoint); do not pass --node-rank";
  if (!c.seat_secret.empty() && !seat_secret_matches(hello.seat, c.seat_secret))
    return "its seat secret is not the one behind its seat commitment";
  if (hello.nproc < 1 || static_cast<long long>(c.rank_offset) + hello.nproc > c.world_size)
    return "its " + counted(hello.nproc, "worker") + " from rank " + std::to_string(c.rank_offset) +
           " do not fit world size " + std::to_string(c.world_size);
  return {};
}

// The nodes' worker counts against what they claimed: "" when they add up, else what does not.
std::string check_counts(const RendezvousState::Adoption& a) {
  long long offset = 0;
  for (std::size_t rank = 0; rank < a.nprocs.size(); ++rank) {
    if (a.rank_offsets[rank] != offset)
      return "node " + std::to_string(rank) + " claims rank offset " + std::to_string(a.rank_offsets[rank]) +
             ", but the nodes below it run " + std::to_string(offset) + " workers";
    offset += a.nprocs[rank];
  }
  if (offset != a.claim.world_size)
    return "the nodes run " + std::to_string(offset) + " workers, not world size " +
           std::to_string(a.claim.world_size);
  if (nprocs_fingerprint(a.nprocs) != a.claim.fingerprint)
    return "their worker counts do not give the round's fingerprint";
  return {};
}

// "" when the claim is of the round this server remembers from before its restart, made by the agent that held
// the claimed place (it knows the secret behind that place's seat); else why not. Nothing remembered: "".
std::string check_remembered(const RendezvousState& state, const ResumeClaim& claim) {
  const auto& known = state.config.remembered;
  if (!known) return {};
  if (!same_round(claim, known->round))
    return "cannot take back " + round_text(claim) + ": before its restart this server ran " + round_text(known->round);
  const auto rank = static_cast<std::size_t>(claim.node_rank);
  if (rank < known->seats.size() && !known->seats[rank].empty() && !seat_secret_matches(known->seats[rank], claim.seat_secret))
    return "node rank " + std::to_string(claim.node_rank) + " of " + round_text(claim) + " is another agent's: this "
           "claim does not hold the secret behind that node's seat";
  return {};
}

// The round runs again, with the nodes that are back; the reports held meanwhile are replayed.
void adopt(RendezvousState& state, const Now& now, Actions& out) {
  RendezvousState::Adoption a = std::move(*state.adopting);
  state.adopting.reset();
  state.phase = Phase::kRunning;
  state.restart_count = a.claim.restart_count;
  state.failure_restarts = std::min(a.claim.restart_count, state.config.max_restarts);
  state.round_size = static_cast<int>(std::count_if(state.by_rank.begin(), state.by_rank.end(),
                                                    [](ConnId c) { return c != 0; }));
  state.done_count = state.stopped_count = state.ready_count = 0;
  state.last_call_deadline.reset();
  for (auto& [conn, node] : state.nodes) node.done = node.stopped = node.ready = false;
  for (std::size_t rank = 0; rank < state.by_rank.size(); ++rank)
    if (state.by_rank[rank] != 0) state.nodes.at(state.by_rank[rank]).rank_offset = a.rank_offsets[rank];
  out.push_back(Log{LogLevel::kInfo, "took back " + round_text(a.claim) + " from " +
                                         counted(state.round_size, "node") + " after this server's restart"});
  remember_round(state, a.claim, out);
  for (auto& [conn, failure] : a.held) {
    if (state.phase != Phase::kRunning && state.phase != Phase::kRestarting) break;
    if (failure) on_failure(state, FailureReport{conn, std::move(*failure)}, now, out);
    else on_node_done(state, NodeDone{conn}, now, out);
  }
  for (auto& [conn, view] : a.held_views) {
    if (state.phase != Phase::kRunning) break;
    on_hang_report(state, HangReport{conn, std::move(view)}, now, out);
  }
}

// A node's claim when this server's round already runs: a duplicate, or a node the job went on without.
void resume_into_running(RendezvousState& state, const Hello& event, Actions& out) {
  const ResumeClaim& claim = *event.hello.resume;
  const auto rank = static_cast<std::size_t>(claim.node_rank);
  if (claim.restart_count == state.restart_count && rank < state.by_rank.size() && state.by_rank[rank] != 0) {
    const NodeEntry& other = state.nodes.at(state.by_rank[rank]);
    return refuse(event.conn,
                  "duplicate: node rank " + std::to_string(claim.node_rank) + " of round " +
                      std::to_string(claim.restart_count) + " is connected already (host \"" + other.host +
                      "\", " + other.address + ")",
                  event, state, out);
  }
  const std::string dropped = "this node was dropped from " + round_text(claim) + " and the job went on without it "
                              "(now round " + std::to_string(state.restart_count) + ", " + to_string(state.phase) + ")";
  if (!is_elastic(state.config))
    return refuse(event.conn, dropped + "; a job of fixed size does not take a node back", event, state, out);
  // Elastic: its workers are stale, but the node may come back as a new one once they are gone (the same stop
  // a node dropped for silence hears when its connection still stands: state_machine_run.cpp node_gone).
  Failure failure;
  failure.kind = FailureKind::kNodeLost;
  failure.node_rank = claim.node_rank;
  failure.host = event.hello.host;
  failure.message = "dropped from " + round_text(claim);
  out.push_back(Send{event.conn, StopMsg{std::move(failure), dropped + "; its workers are stale", false, false, true}});
  out.push_back(Close{event.conn});
  out.push_back(Log{LogLevel::kWarning, "host \"" + event.hello.host + "\" (" + event.peer_address + ") came back to " +
                                            round_text(claim) + ", which went on without it: told to join again as a new node"});
}

}  // namespace

void on_resume_hello(RendezvousState& state, const Hello& event, const Now& now, Actions& out) {
  if (std::string why = check_auth(state, event); !why.empty()) return refuse(event.conn, why, event, state, out);
  const HelloMsg& hello = event.hello;
  const ResumeClaim& claim = *hello.resume;
  if (tell_the_silent(state, event, out)) return;
  if (state.phase == Phase::kComplete || state.phase == Phase::kStopped)
    return refuse(event.conn, closed_message(state), event, state, out);
  if (state.phase != Phase::kJoining) {
    if (reconnect_into_running(state, event, now, out)) return;
    return resume_into_running(state, event, out);
  }
  if (!state.adopting && !state.nodes.empty())
    return refuse(event.conn,
                  "this rendezvous server is gathering a new round (" + counted(state.nodes.size(), "node") +
                      " joined): it cannot take back " + round_text(claim) + ", which this node runs",
                  event, state, out);
  if (std::string why = check_claim(state, hello); !why.empty())
    return refuse(event.conn, "cannot take back " + round_text(claim) + ": " + why, event, state, out);
  if (std::string why = check_remembered(state, claim); !why.empty()) return refuse(event.conn, why, event, state, out);
  if (!state.adopting) {
    RendezvousState::Adoption a;
    a.claim = claim;
    a.deadline = now.steady + state.config.heartbeat_timeout;
    a.nprocs.assign(static_cast<std::size_t>(claim.nnodes), 0);
    a.rank_offsets.assign(static_cast<std::size_t>(claim.nnodes), 0);
    state.by_rank.assign(static_cast<std::size_t>(claim.nnodes), 0);
    state.adopting = std::move(a);
    out.push_back(Log{LogLevel::kWarning, "this rendezvous server restarted while the job ran: taking back " +
                                              round_text(claim) + " from its nodes (at most " +
                                              text::seconds(state.config.heartbeat_timeout) + ")"});
  }
  RendezvousState::Adoption& a = *state.adopting;
  const auto rank = static_cast<std::size_t>(claim.node_rank);
  if (!same_round(claim, a.claim))
    return refuse(event.conn,
                  "conflicting report: this node runs " + round_text(claim) + ", but the nodes already back run " +
                      round_text(a.claim) + " (fingerprints " + claim.fingerprint + " and " + a.claim.fingerprint +
                      "); the restarted rendezvous server cannot rebuild one round from both",
                  event, state, out);
  if (state.by_rank[rank] != 0) {
    const NodeEntry& other = state.nodes.at(state.by_rank[rank]);
    return refuse(event.conn,
                  "duplicate: node rank " + std::to_string(claim.node_rank) + " of round " +
                      std::to_string(claim.restart_count) + " is back already (host \"" + other.host + "\", " +
                      other.address + ")",
                  event, state, out);
  }
  NodeEntry node = new_node(state, event);  // as a join's: a later re-form's MASTER_ADDR needs its addresses
  node.node_rank = claim.node_rank;
  state.by_rank[rank] = event.conn;
  a.nprocs[rank] = hello.nproc;
  a.rank_offsets[rank] = claim.rank_offset;
  NodeEntry& stored = add_node(state, std::move(node));
  touch(state, stored, now);
  out.push_back(Log{LogLevel::kInfo, "node " + std::to_string(claim.node_rank) + " (host \"" + stored.host +
                                         "\") resumed round " + std::to_string(claim.restart_count) + " (" +
                                         std::to_string(state.nodes.size()) + " of " +
                                         std::to_string(claim.nnodes) + ")"});
  if (static_cast<int>(state.nodes.size()) < claim.nnodes) return;
  if (std::string why = check_counts(a); !why.empty()) {
    Failure failure;
    failure.kind = FailureKind::kNodeLost;
    failure.time_unix_ms = now.unix_ms;
    failure.message = "the nodes' reports of " + round_text(a.claim) + " do not add up: " + why;
    state.adopting.reset();
    return stop_job(state, std::move(failure), "the restarted rendezvous server cannot take the round back", out);
  }
  adopt(state, now, out);
}

void remember_round(const RendezvousState& state, const ResumeClaim& round, Actions& out) {
  if (!state.config.resumable) return;  // an agent-hosted server dies with its node: nothing to take back
  RememberRound remember;
  remember.round.round = round;
  remember.round.round.node_rank = remember.round.round.rank_offset = 0;
  remember.round.round.seat_secret.clear();
  remember.round.seats.reserve(state.by_rank.size());
  // A place nobody has claimed again yet (its node lost with the last host) keeps what the round kept before:
  // its seat, which only its own agent can claim, and its host, which the verdict names if it never comes.
  const auto& known = state.config.remembered;
  for (std::size_t rank = 0; rank < state.by_rank.size(); ++rank) {
    const ConnId conn = state.by_rank[rank];
    const auto it = conn == 0 ? state.nodes.end() : state.nodes.find(conn);
    const bool kept = it == state.nodes.end() && known && rank < known->seats.size();
    remember.round.seats.push_back(it != state.nodes.end() ? it->second.seat_commit
                                   : kept                  ? known->seats[rank]
                                                           : std::string());
    remember.round.hosts.push_back(it != state.nodes.end()               ? it->second.host
                                   : kept && rank < known->hosts.size() ? known->hosts[rank]
                                                                        : std::string());
  }
  out.push_back(std::move(remember));
}

bool hold_while_adopting(RendezvousState& state, ConnId conn, const std::optional<Failure>& failure,
                         const Now& now) {
  if (!state.adopting) return false;
  auto it = state.nodes.find(conn);
  if (it == state.nodes.end()) return true;
  touch(state, it->second, now);
  state.adopting->held.emplace_back(conn, failure);
  return true;
}

// Nodes of the round not back in time are lost: the job stops, or (elastic, MIN back) re-forms without them.
void check_adoption_deadline(RendezvousState& state, const Now& now, Actions& out) {
  if (!state.adopting || now.steady < state.adopting->deadline) return;
  const RendezvousState::Adoption& a = *state.adopting;
  std::vector<int> missing;
  for (std::size_t rank = 0; rank < state.by_rank.size(); ++rank)
    if (state.by_rank[rank] == 0) missing.push_back(static_cast<int>(rank));
  Failure failure;
  failure.kind = FailureKind::kNodeLost;
  failure.node_rank = missing.front();
  // Its host, where the round was remembered (the claims of the others cannot say it).
  if (const auto& known = state.config.remembered; known && failure.node_rank < static_cast<int>(known->hosts.size()))
    failure.host = known->hosts[static_cast<std::size_t>(failure.node_rank)];
  failure.time_unix_ms = now.unix_ms;
  failure.message = "it did not come back to the restarted rendezvous server within " +
                    text::seconds(state.config.heartbeat_timeout) +
                    (missing.size() > 1 ? " (nor did " + counted(missing.size() - 1, "other node") + ")" : "");
  const int back = static_cast<int>(state.nodes.size());
  const std::string round = round_text(a.claim);
  if (!is_elastic(state.config) || back < state.config.min_nodes) {
    state.adopting.reset();
    return stop_job(state, std::move(failure), "a node of " + round + " was lost while the rendezvous server was down",
                    out);
  }
  // The survivors' workers fail as soon as the lost node's vanish (gloo: "Connection closed by peer"): held
  // while the round was taken back, those failures are the loss's victims, not its cause. Replayed first, one
  // was the root cause: exit 1 naming a victim with --max-restarts 0, a restart spent with more (issue 53). The
  // re-form for the loss uses no restart and stops their workers all the same.
  std::vector<Failure> victims;
  auto& held = state.adopting->held;
  for (auto it = held.begin(); it != held.end();) {
    if (!it->second) {
      ++it;
      continue;
    }
    victims.push_back(std::move(*it->second));
    it = held.erase(it);
  }
  adopt(state, now, out);
  if (state.phase != Phase::kRunning) return;  // a held report ended or re-formed it already
  for (const Failure& victim : victims)
    out.push_back(Log{LogLevel::kInfo, describe(victim) + ", while node " + std::to_string(failure.node_rank) +
                                           " was lost: a victim of that loss, not its cause"});
  begin_reform(state, std::move(failure),
               "re-forming the job without " + counted(missing.size(), "node") +
                   " that did not come back after the rendezvous server restarted: " + counted(back, "node") +
                   " left (no restart used)",
               /*membership=*/false, out);
}

}  // namespace ddprun::rendezvous::rules
