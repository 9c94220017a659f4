#include "rendezvous/hang_verdict.hpp"

#include <algorithm>
#include <csignal>
#include <iterator>
#include <cstdio>
#include <map>
#include <tuple>

#include "common/time.hpp"

namespace ddprun::rendezvous {
namespace {

// The message stays well inside a frame whatever the world size: rank lists are runs, and at most this
// many distinct steps are listed.
constexpr std::size_t kMaxStepsListed = 8;

// Orders ranks from most to least suspect: a rank inside a quiet phase it declared last (its silence is by
// its word: an evaluation, a save, or waiting for one); then behind first (a rank that never beat before every
// rank that did, then the smallest step), then silent longest, then the lowest rank for a stable answer.
std::int64_t progress(const RankBeat& r) { return r.never_beat ? -2 : r.step; }
auto suspicion(const RankBeat& r) { return std::make_tuple(r.quiet, progress(r), -r.silent_ms, r.rank); }
auto how_far(const RankBeat& r) { return std::make_pair(r.quiet, progress(r)); }  // suspicion's first part

struct Candidate {
  const RankBeat* rank;
  const NodeHangView* node;
};

std::string where(const RankBeat& r) {
  std::string at = r.never_beat ? "before its first heartbeat"
                                : r.step >= 0 ? "at step " + std::to_string(r.step) : "with no step given";
  if (r.python_stack) at += r.collective.empty() ? " outside any collective" : " in " + r.collective;
  return at;
}

// Among ranks equally far (the same step), what their Python stacks say: ranks waiting in a collective wait for
// those that are not in one; if all are in one, the odd one out is in another (it skipped the others' call).
// Returns the candidates left; unchanged when the stacks do not tell.
std::vector<Candidate> by_stacks(std::vector<Candidate> tied) {
  std::map<std::string, std::vector<Candidate>> in;  // collective → ranks; "" = outside any
  for (const Candidate& c : tied)
    if (c.rank->python_stack) in[c.rank->collective].push_back(c);
  if (in.size() < 2) return tied;
  if (auto outside = in.find(""); outside != in.end()) return outside->second;
  const auto smallest = std::min_element(in.begin(), in.end(), [](const auto& a, const auto& b) {
    return a.second.size() < b.second.size();
  });
  const bool unique = std::count_if(in.begin(), in.end(), [&](const auto& g) {
                        return g.second.size() == smallest->second.size();
                      }) == 1;
  return unique ? smallest->second : tied;
}

}  // namespace

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string hang_message(std::int64_t silent_ms, std::int64_t step, std::int64_t last_beat_unix_ms,
                         const std::string& stacks, bool never_beat, const std::string& evidence,
                         bool by_initial_timeout) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", static_cast<double>(silent_ms) / 1000.0);
  std::string m;
  if (never_beat) {
    m = std::string("hung: no first heartbeat ") + secs + " after its start";
    if (by_initial_timeout) m += " (--hang-initial-timeout)";
  } else {
    m = std::string("hung: no heartbeat for ") + secs;
    if (step >= 0) m += " after step " + std::to_string(step);
    m += " (last beat at " + iso_time(last_beat_unix_ms) + ")";
  }
  m += "; killed with SIGKILL";
  if (!evidence.empty()) m += "; " + evidence;
  if (!stacks.empty()) m += "; stacks in " + stacks;
  return m;
}

Failure hang_verdict(const std::vector<NodeHangView>& views, std::int64_t now_unix_ms) {
  // The least advanced ranks (and not quiet by their word), then what the stacks say, then the longest silence.
  std::vector<Candidate> all;
  for (const NodeHangView& v : views)
    for (const RankBeat& r : v.view.ranks) all.push_back({&r, &v});
  auto more_suspect = [](const Candidate& a, const Candidate& b) { return suspicion(*a.rank) < suspicion(*b.rank); };
  std::vector<Candidate> tied;
  if (!all.empty()) {
    const auto furthest_behind = how_far(*std::min_element(all.begin(), all.end(), more_suspect)->rank);
    std::copy_if(all.begin(), all.end(), std::back_inserter(tied),
                 [&](const Candidate& c) { return how_far(*c.rank) == furthest_behind; });
  }
  const std::vector<Candidate> left = by_stacks(tied);
  const auto chosen = std::min_element(left.begin(), left.end(), more_suspect);
  const RankBeat* suspect = chosen == left.end() ? nullptr : chosen->rank;
  const NodeHangView* suspect_node = chosen == left.end() ? nullptr : chosen->node;
  Failure f;
  f.time_unix_ms = now_unix_ms;
  f.signal = SIGKILL;
  if (!suspect) {  // nobody reported a running worker: the job is stopped, with no rank to blame
    f.signal.reset();
    f.exit_code = 1;
    f.message = "hung: a worker stopped beating, but no node reported a running worker to judge";
    if (!views.empty()) {
      f.node_rank = views.front().node_rank;
      f.host = views.front().host;
    }
    return f;
  }
  f.node_rank = suspect_node->node_rank;
  f.host = suspect_node->host;
  f.rank = suspect->rank;
  f.local_rank = suspect->local_rank;
  f.pid = suspect->pid;

  // Evidence: where the others were, grouped by position ("ranks 0,2-3 at step 42").
  // (progress, never beat, stack seen, collective) → the ranks there, and one of them to say where that is
  std::map<std::tuple<std::int64_t, bool, bool, std::string>, std::pair<std::vector<int>, const RankBeat*>> others;
  std::vector<std::string> stacks;
  for (const NodeHangView& v : views) {
    // One node: its path; several: each prefixed with its host, where the file is.
    if (!v.view.stacks.empty()) stacks.push_back(views.size() == 1 ? v.view.stacks : v.host + ":" + v.view.stacks);
    for (const RankBeat& r : v.view.ranks)
      if (&r != suspect) {
        auto& group = others[{progress(r), r.never_beat, r.python_stack, r.collective}];
        group.first.push_back(r.rank);
        group.second = &r;
      }
  }
  std::string evidence;
  std::size_t listed = 0;
  for (auto it = others.rbegin(); it != others.rend() && listed < kMaxStepsListed; ++it, ++listed) {
    evidence += (evidence.empty() ? "" : ", ") + rank_list(it->second.first) + " " + where(*it->second.second);
  }
  if (others.size() > kMaxStepsListed) evidence += ", and others";
  if (!evidence.empty()) {
    const std::string self = rank_list({suspect->rank}) + " " + where(*suspect);
    evidence = self + " while " + evidence;
  }
  std::string stack_list;
  for (std::size_t i = 0; i < stacks.size(); ++i) stack_list += (i ? ", " : "") + stacks[i];
  f.message = hang_message(suspect->silent_ms, suspect->step, now_unix_ms - suspect->silent_ms, stack_list,
                           suspect->never_beat, evidence, /*by_initial_timeout=*/suspect->hung);
  if (f.message.size() > kMaxMessageBytes) f.message.resize(kMaxMessageBytes);
  return f;
}

}  // namespace ddprun::rendezvous
