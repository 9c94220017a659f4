// Which rank hung the job: decided once, from every node's view of its workers' beats (protocol.hpp's
// hang_view), not by the first agent whose worker went silent. A pure function, unit-tested in
// tests/rendezvous/state_machine_hang_test.cpp.
//
// Why job-wide: in a collective every rank waits for the slowest, so the ranks that go silent first are often
// the waiters, and which of them an agent notices first is a matter of microseconds. The rank that is
// *behind* is the suspect: the smallest step among all ranks (a rank that never beat counts as behind every
// rank that did); among equals, a rank whose process is stopped (SIGSTOP: it holds everyone), then what their
// stacks say (those waiting in a collective — an explicit one, DDP's gradient all-reduce in backward, or a
// native gloo/NCCL wait — wait for a rank outside it, or for the odd one out in another collective: it
// skipped theirs), then one named a straggler this round, then the one silent longest by a clear margin. Where none of that separates the ranks,
// the verdict says so ("could not tell which one holds the others") instead of naming one at random.
// A rank inside a quiet phase it declared is no suspect: while one is, the ranks beside it wait for it
// (quiet_deferral), and nobody is named until its bound runs out. The verdict names the evidence: where
// every other rank was, and where each node's stacks are (host:path when several nodes answered).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/failure.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

struct NodeHangView {
  int node_rank = 0;
  std::string host;
  HangViewMsg view;
  // How long before the verdict the server received this view: its silences are that much older by then.
  // Views of different nodes are taken at different times (each after its own capture), so silences are
  // compared as of the verdict, not as each node measured them.
  std::int64_t age_ms = 0;
};

// Silences closer than this do not tell ranks apart: in lockstep training every rank beats within
// milliseconds of the others at the end of a step, and views are taken seconds apart.
inline constexpr std::int64_t kSilenceMarginMs = 1000;

// A rank is named only when its own node's view confirms it silent (issue 33: an insider's view claiming its own
// rank at step 10^9 made the server name an honest rank that had beaten 0.0 s before, and its node SIGKILLed it):
// its own agent found it hung, or it was stopped, or it had been silent at least this long. The rank's own agent
// checks again before it acts (agent/hang_inquiry.cpp): it SIGKILLs a rank named hung only when it has been
// silent half this node's --hang-timeout (kUnconfirmedWithoutTimeoutMs without one), or is stopped.
inline constexpr std::int64_t kMinConfirmedSilenceMs = 500;
inline constexpr std::int64_t kUnconfirmedWithoutTimeoutMs = 10'000;

// Some rank of the job is inside a quiet phase it declared (and its bound still runs) and not itself waiting in a
// collective by its stacks: the silent ranks wait for it, nobody is hung yet. Returns the deferral to send every
// node (those quiet ranks, the longest bound left), or none.
std::optional<HangDeferredMsg> quiet_deferral(const std::vector<NodeHangView>& views);

// Issue 56: the ranks their own agents found hung that beat again during the capture, when no rank of any view is
// still hung or stopped: the inquiry ends without a verdict (its evidence is gone), and the watch goes on. Empty
// when any rank is still hung or stopped, or none recovered: the verdict is given as ever.
std::vector<int> recovered_ranks(const std::vector<NodeHangView>& views);

// The root cause for the job: the suspect as a Failure (killed with SIGKILL by its agent), with a message
// that starts "hung:" (is_hang). `now_unix_ms` dates the suspect's last beat. When the evidence cannot separate
// several ranks, an `unsure` failure whose message lists them (its rank is only the first of them): every
// agent then kills its silent workers with SIGKILL. Empty views, or none whose own node confirms a rank silent
// (kMinConfirmedSilenceMs), give a failure naming no rank that says so. Never throws.
Failure hang_verdict(const std::vector<NodeHangView>& views, std::int64_t now_unix_ms);

// A hung worker's message, after the rank: "hung: no heartbeat for 3.0 s after step 41 (last beat at
// 2026-01-02T03:04:05.678Z); killed with SIGKILL; stacks in PATH". step < 0: no step given; stacks empty:
// nothing captured. One that never beat (the initial timeout): "hung: no first heartbeat 60.0 s after its
// start (--hang-initial-timeout); ..." (without the option's name when its timeout was not what found it: the
// job-wide verdict named it); last_beat_unix_ms is then ignored. `evidence` (the other ranks' steps) goes
// before the stacks.
std::string hang_message(std::int64_t silent_ms, std::int64_t step, std::int64_t last_beat_unix_ms,
                         const std::string& stacks, bool never_beat = false, const std::string& evidence = "",
                         bool by_initial_timeout = true);

// "rank 3", "ranks 0-2,5": ascending, runs of consecutive ranks joined; past `max_runs` runs, "and N more".
std::string rank_list(std::vector<int> ranks, std::size_t max_runs = static_cast<std::size_t>(-1));

}  // namespace ddprun::rendezvous
