// A host elected in etcd whose lease is lapsing (issue 53, invariant 2).
//
// etcd elects another host once this one's lease runs out. A host cut off from etcd's quorum cannot renew it, and
// it cannot know whether the nodes it no longer hears are dead or on the other side of the cut, joining that host.
// So, once the lease can no longer be counted on (the election's on_lease_standing, well before it can run out by
// this machine's clock): the running round goes on only while every node of it is heard. Whole, no other side
// holds any of its nodes, and etcd going down mid-training costs nothing (torchrun 1.13 loses the job in 3.5 s
// there). A node silent for lapse_silence (3 heartbeat intervals, not the heartbeat timeout) is lost at once: the
// round stops (an elastic job's re-form then meets the gate, which asks etcd for a renewal and, without quorum,
// resigns; a fixed-size job ends, its verdict recorded in etcd or said unconfirmed, 74). Before, such a host
// judged the node only at its heartbeat timeout, 15 s, after its 10 s lease: a successor could be elected first.
#include <algorithm>
#include <vector>

#include "rendezvous/state_machine_rules.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous::rules {
namespace {

// The placed nodes of a running round the lapse judges (the server's own node is never silent to it).
template <typename Visit>
void for_each_judged(const RendezvousState& state, const Now& now, Visit visit) {
  if (!state.lease_lapsing || state.phase != Phase::kRunning) return;
  for (const ConnId conn : round_conns(state)) {
    auto it = state.nodes.find(conn);
    // A node spared after this server's own stop is judged at its own deadline (state_machine_cut_off.cpp).
    if (it != state.nodes.end() && !it->second.hosts_server && now.steady >= it->second.spared_until)
      visit(conn, it->second);
  }
}

}  // namespace

void on_lease_standing(RendezvousState& state, const LeaseStanding& event, const Now& now, Actions& out) {
  if (state.lease_lapsing == event.lapsing) return;
  state.lease_lapsing = event.lapsing;
  if (!event.lapsing) {
    out.push_back(Log{LogLevel::kInfo, "etcd renewed this host's lease again: the round's nodes are judged by the "
                                       "heartbeat timeout again"});
    return;
  }
  out.push_back(Log{LogLevel::kWarning,
                    "etcd has not renewed this host's lease lately (etcd's quorum out of reach?): the round runs on "
                    "only while every node of it is heard; a node silent for " +
                        text::seconds(lapse_silence(state.config)) +
                        " now stops it, before another host can be elected"});
  judge_round_while_lapsing(state, now, out);
}

void judge_round_while_lapsing(RendezvousState& state, const Now& now, Actions& out) {
  const auto silence = lapse_silence(state.config);
  std::vector<std::pair<Clock::time_point, ConnId>> silent;
  for_each_judged(state, now, [&](ConnId conn, const NodeEntry& node) {
    if (now.steady - node.last_seen >= silence) silent.emplace_back(node.last_seen, conn);
  });
  std::sort(silent.begin(), silent.end());  // the longest silent first: a fixed-size job's root cause
  for (const auto& [last_seen, conn] : silent) {
    if (state.phase != Phase::kRunning) return;
    const auto gone = std::chrono::duration_cast<std::chrono::milliseconds>(now.steady - last_seen);
    silent_node_lost(state, conn,
                     "missed heartbeats for " + text::seconds(gone) +
                         " while etcd could not renew the host's lease (a partition? the round stops before "
                         "another host can be elected)",
                     now, out);
  }
}

std::optional<Clock::time_point> lapse_deadline(const RendezvousState& state) {
  std::optional<Clock::time_point> next;
  const auto silence = lapse_silence(state.config);
  if (!state.lease_lapsing || state.phase != Phase::kRunning) return next;
  for (const ConnId conn : round_conns(state)) {
    auto it = state.nodes.find(conn);
    if (it == state.nodes.end() || it->second.hosts_server) continue;
    const auto at = std::max(it->second.last_seen + silence, it->second.spared_until);
    if (!next || at < *next) next = at;
  }
  return next;
}

}  // namespace ddprun::rendezvous::rules
