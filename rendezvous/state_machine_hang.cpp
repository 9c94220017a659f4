// The job-wide hang verdict (--hang-timeout): the first node that finds a hung worker sends its view; the
// server asks every other node of the round for theirs (each agent captures every worker's stacks and reads
// every worker's beats), then names the rank that is behind (hang_verdict.hpp) and fails the job with it, as
// a worker failure: restart while max_restarts allows, else stop.
#include <algorithm>

#include "common/timeouts.hpp"
#include "rendezvous/hang_verdict.hpp"
#include "rendezvous/state_machine_rules.hpp"

namespace ddprun::rendezvous::rules {
namespace {

// How long the verdict waits for the other nodes' views. Their agents capture stacks first (at most 5 s, and
// up to 15 s while an NCCL Flight Recorder dump is being written: agent_config.hpp's stack_capture_limit and
// nccl_dump_limit), so this leaves room for that and for a loaded machine; a node that has not answered by
// then is judged without.
constexpr std::chrono::milliseconds kHangInquiryLimit = timeouts::kHangInquiry;

std::string node_name(const NodeEntry& node) {
  return "node " + std::to_string(node.node_rank) + " (host \"" + node.host + "\")";
}

void decide(RendezvousState& state, const Now& now, Actions& out) {
  std::vector<NodeHangView> views;
  for (const auto& [conn, view] : state.hang->views) {
    auto it = state.nodes.find(conn);
    if (it == state.nodes.end()) continue;
    const auto received = state.hang->received.find(conn);
    const std::int64_t age_ms = received == state.hang->received.end()
                                    ? 0
                                    : std::chrono::duration_cast<std::chrono::milliseconds>(now.steady - received->second).count();
    views.push_back({it->second.node_rank, it->second.host, view, std::max<std::int64_t>(0, age_ms)});
  }
  state.hang.reset();
  // A rank inside a quiet phase it declared: the silent ranks beside it wait for it. Nobody is hung yet.
  if (std::optional<HangDeferredMsg> deferral = quiet_deferral(views)) {
    out.push_back(Log{LogLevel::kWarning, "hang inquiry: " + rank_list(deferral->quiet_ranks) +
                                              " inside a declared quiet phase (up to " +
                                              std::to_string(deferral->wait_ms / 1000) +
                                              " s more); the silent ranks wait for it: no verdict"});
    out.push_back(Broadcast{round_conns(state), std::move(*deferral)});
    return admit_waiting_joiners(state, now, out);  // a join that waited for the inquiry
  }
  // Every rank found hung beat again during the capture (issue 56: the verdict named them anyway, "silent for about
  // 1.7 s" with a 4 s timeout, and the job ended 78 though nobody was killed): no verdict, the watch goes on.
  if (std::vector<int> recovered = recovered_ranks(views); !recovered.empty()) {
    out.push_back(Log{LogLevel::kWarning, "hang inquiry: " + rank_list(recovered) + ", found hung, beat again "
                                          "during the capture: not hung, no verdict"});
    out.push_back(Broadcast{round_conns(state), HangDeferredMsg{{}, 0, std::move(recovered)}});
    return admit_waiting_joiners(state, now, out);
  }
  std::sort(views.begin(), views.end(), [](const auto& a, const auto& b) { return a.node_rank < b.node_rank; });
  if (static_cast<int>(views.size()) < state.round_size)
    out.push_back(Log{LogLevel::kWarning, "hang verdict from " + std::to_string(views.size()) + " of " +
                                              std::to_string(state.round_size) + " nodes' views (the others did "
                                              "not answer within " + std::to_string(kHangInquiryLimit.count() / 1000) + " s)"});
  Failure verdict = hang_verdict(views, now.unix_ms);
  out.push_back(Log{LogLevel::kWarning, "hang verdict: " + describe(verdict)});
  worker_failed(state, std::move(verdict), out);
}

}  // namespace

void on_hang_report(RendezvousState& state, const HangReport& event, const Now& now, Actions& out) {
  auto it = state.nodes.find(event.conn);
  if (state.adopting) {  // a restarted server taking the round back: the view waits until the round is whole
    if (it != state.nodes.end()) {
      touch(state, it->second, now);
      state.adopting->held_views.emplace_back(event.conn, event.view);
    }
    return;
  }
  // Only a running round is judged; a late joiner that waits runs no worker.
  if (it == state.nodes.end() || state.phase != Phase::kRunning || it->second.node_rank < 0) return;
  NodeEntry& node = it->second;
  for (const RankBeat& r : event.view.ranks) {
    Failure as_failure;
    as_failure.rank = r.rank;
    as_failure.local_rank = r.local_rank;
    if (std::string why = check_ranks(state, node, as_failure); !why.empty())
      return node_lost(state, event.conn, "its agent sent an invalid hang view (" + why + ")", now, out);
  }
  touch(state, node, now);
  if (!state.hang) {
    if (!event.view.suspect) return;  // an answer to an inquiry already decided
    state.hang = RendezvousState::HangInquiry{now.steady + kHangInquiryLimit, {}, {}};
    std::vector<ConnId> others = round_conns(state);
    others.erase(std::remove(others.begin(), others.end(), event.conn), others.end());
    out.push_back(Log{LogLevel::kWarning, node_name(node) + " found a hung worker" +
                                              (others.empty() ? std::string()
                                                              : ": asking the other nodes for their workers' "
                                                                "beats and stacks")});
    if (!others.empty()) out.push_back(Broadcast{std::move(others), CaptureMsg{}});
  }
  state.hang->views[event.conn] = event.view;
  state.hang->received[event.conn] = now.steady;
  if (static_cast<int>(state.hang->views.size()) >= state.round_size) decide(state, now, out);
}

void check_hang_deadline(RendezvousState& state, const Now& now, Actions& out) {
  if (state.hang && state.phase == Phase::kRunning && now.steady >= state.hang->deadline) decide(state, now, out);
}

}  // namespace ddprun::rendezvous::rules
