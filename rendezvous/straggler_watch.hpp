// Straggler naming (docs/MONITORING.md "Stragglers"): a rank that is alive but slow slows every collective of the job.
// The server hears each running rank's pace from its agent every few seconds (node_status' paces, measured
// over the agent's window) and names a rank whose pace stays above the other ranks' median by the threshold.
//
// What is compared. In a job whose ranks step in lockstep (DDP: every step ends in collectives) every rank's
// step takes as long as the slowest's, so step times cannot tell the slow rank. Each rank's own work per step
// can: the time it spent on its own computation rather than waiting for the others, which the SDK measures
// by itself and a Python worker says with ddprun_heartbeat.work(). When every rank says its work, work per
// step is compared; otherwise step time (which names a slow rank in a job whose ranks do not wait for each
// other, and never names anyone in a lockstep job: no false report).
//
// The rule: rank r is named once, for `persist`, every judgement found its pace above
// median(others) × (1 + threshold); it is no longer named once, for `persist`, it was at or below
// median(others) × (1 + threshold / 2) (a margin, so that a rank near the line is not named and cleared over
// and over). The median is over the other ranks, so that in a job of two the slow one is compared with the
// fast one, not with a middle that it pulls up itself; for an even count it is the upper of the middle two, so
// that a rank is named only when it is slower than more than half of the others (a minority's paces, true or
// false, cannot move the line).
//
// Cost (issue 33: copying and sorting every other rank's pace for every rank, at every node's status, took a
// 1 024-rank job's server 8.4 s of CPU per 20 s): a report only replaces its node's entry (O(its ranks)); a
// judgement sorts the paces once and reads each rank's median of the others off the sorted list, O(R log R).
// The server judges on its timer, not per status.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

struct StragglerRule {
  double threshold = 0.30;                    // a fraction: 0.30 = 30% slower; 0 turns naming off
  std::chrono::milliseconds persist{10'000};  // how long the pace must stay past the line, either way
  bool enabled() const { return threshold > 0; }
};

class StragglerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StragglerWatch(StragglerRule rule = {}) : rule_(rule) {}

  // A node's latest paces, replacing all it said before (a rank it no longer reports is no longer judged; a
  // named one stays named: a straggler that stopped making steps has not recovered). The caller keeps only
  // the node's own ranks (own_paces); a rank two nodes report is judged once, with the lower node's pace.
  void report(int node_rank, const std::string& host, std::vector<RankPace> paces);
  void forget_node(int node_rank);
  // A new round: ranks are numbered afresh, the named are no longer named (no message: every agent starts
  // its round with none).
  void clear();
  // Judges every rank with every node's latest paces; true when the set of named ranks changed.
  bool judge(Clock::time_point now);
  // The named, with the pace and median of the latest judgement.
  const std::vector<Straggler>& named() const { return named_; }

 private:
  struct NodeReport {
    std::string host;
    std::vector<RankPace> paces;
  };
  StragglerRule rule_;
  std::map<int, NodeReport> nodes_;               // by node rank: the nodes that report, until forgotten
  std::map<int, Clock::time_point> over_since_;   // judged above the line in every judgement since
  std::map<int, Clock::time_point> under_since_;  // named, judged at or below the margin in every one since
  std::vector<Straggler> named_;
};

// Keeps the paces of the ranks [first, first + count) only, each once (issue 33: a status's paces were not
// checked against its sender's ranks, so an insider could make any rank look slow or fast); how many went.
std::size_t own_paces(std::vector<RankPace>& paces, int first, int count);

}  // namespace ddprun::rendezvous
