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
constexpr std::size_t kMaxRunsListed = 8;  // runs of ranks in one list ("ranks 0,2,4 and 997 more")

// Orders ranks from most to least suspect: a rank inside a quiet phase it declared last (its silence is by
// its word: an evaluation, a save, or waiting for one); then behind first (a rank that never beat before every
// rank that did, then the smallest step), then silent longest, then the lowest rank for a stable answer.
std::int64_t progress(const RankBeat& r) { return r.never_beat ? -2 : r.step; }

struct Candidate {
  const RankBeat* rank;
  const NodeHangView* node;
  std::int64_t silent_ms() const { return rank->silent_ms + node->age_ms; }  // as of the verdict
};

auto suspicion(const Candidate& c) {
  return std::make_tuple(c.rank->quiet, progress(*c.rank), -c.silent_ms(), c.rank->rank);
}
auto how_far(const RankBeat& r) { return std::make_pair(r.quiet, progress(r)); }  // suspicion's first part

// Among tied ranks, those with a mark the others lack (`flag`: stopped, named a straggler); unchanged when none or
// all have it, since then it tells nothing.
std::vector<Candidate> by_mark(std::vector<Candidate> tied, bool RankBeat::*flag) {
  std::vector<Candidate> marked;
  std::copy_if(tied.begin(), tied.end(), std::back_inserter(marked), [&](const Candidate& c) { return c.rank->*flag; });
  return marked.empty() || marked.size() == tied.size() ? tied : marked;
}

// Among ranks still tied, the one silent longest when it is so by a clear margin; none when silences are too
// close to tell anything (lockstep ranks beat within milliseconds of each other).
const Candidate* by_silence(const std::vector<Candidate>& left) {
  if (left.empty()) return nullptr;
  std::vector<const Candidate*> order;
  for (const Candidate& c : left) order.push_back(&c);
  std::sort(order.begin(), order.end(), [](const Candidate* a, const Candidate* b) { return suspicion(*a) < suspicion(*b); });
  if (order.size() == 1 || order[0]->silent_ms() - order[1]->silent_ms() >= kSilenceMarginMs) return order[0];
  return nullptr;
}

std::string where(const RankBeat& r) {
  std::string at = r.never_beat ? "before its first heartbeat"
                                : r.step >= 0 ? "at step " + std::to_string(r.step) : "with no step given";
  if (r.stopped) at += " stopped (SIGSTOP)";
  if (r.slow) at += " (named a straggler)";
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

std::string rank_list(std::vector<int> ranks, std::size_t max_runs) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  std::size_t runs = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    if (runs++ == max_runs) {
      out += " and " + std::to_string(ranks.size() - i) + " more";
      break;
    }
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

std::optional<HangDeferredMsg> quiet_deferral(const std::vector<NodeHangView>& views) {
  // A bound the view does not say (an older agent): look again after this long.
  constexpr std::int64_t kUnsaidBoundMs = 10'000;
  HangDeferredMsg m;
  for (const NodeHangView& v : views)
    for (const RankBeat& r : v.view.ranks)
      // A quiet rank that is itself waiting in a collective (by its stacks) waits like the others: its phase says
      // why it may be silent, not that the others wait for it (the SDK's quiet_phase test: rank 0 declares 60 s
      // around its allreduce while rank 1 overruns its own 1.5 s bound; rank 1 is the hang).
      if (r.quiet && !(r.python_stack && !r.collective.empty())) {
        if (m.quiet_ranks.size() < kMaxStragglers) m.quiet_ranks.push_back(r.rank);
        m.wait_ms = std::max(m.wait_ms, r.quiet_left_ms > 0 ? r.quiet_left_ms : kUnsaidBoundMs);
      }
  if (m.quiet_ranks.empty()) return std::nullopt;
  std::sort(m.quiet_ranks.begin(), m.quiet_ranks.end());
  m.wait_ms = std::clamp<std::int64_t>(m.wait_ms, 1, kMaxQuietWaitMs);
  return m;
}

std::vector<int> recovered_ranks(const std::vector<NodeHangView>& views) {
  std::vector<int> recovered;
  for (const NodeHangView& v : views)
    for (const RankBeat& r : v.view.ranks) {
      if (r.hung || r.stopped) return {};
      if (r.recovered && recovered.size() < kMaxStragglers) recovered.push_back(r.rank);
    }
  std::sort(recovered.begin(), recovered.end());
  return recovered;
}

Failure hang_verdict(const std::vector<NodeHangView>& views, std::int64_t now_unix_ms) {
  // The least advanced ranks (and not quiet by their word), then a stopped one, then what the stacks say,
  // then the longest silence by a clear margin; else nobody is named.
  std::vector<Candidate> all, starting;
  bool heard_any = false;
  // A round held for a joiner's workers (meet): the kept workers train on in the previous round, so a hang is
  // among them; a new worker that has not beaten yet is starting, not holding anyone (issue 32: the verdict named
  // the joiner's two starting ranks while the kept rank was SIGSTOPped). Named only when nobody else is silent.
  const bool held = std::any_of(views.begin(), views.end(), [](const NodeHangView& v) { return v.view.held; });
  for (const NodeHangView& v : views)
    for (const RankBeat& r : v.view.ranks) {
      heard_any = true;
      const Candidate c{&r, &v};
      if (!(r.hung || r.stopped || c.silent_ms() >= kMinConfirmedSilenceMs)) continue;
      (held && !v.view.held && r.never_beat ? starting : all).push_back(c);
    }
  if (all.empty()) all = std::move(starting);
  auto more_suspect = [](const Candidate& a, const Candidate& b) { return suspicion(a) < suspicion(b); };
  std::vector<Candidate> tied;
  if (!all.empty()) {
    const auto furthest_behind = how_far(*std::min_element(all.begin(), all.end(), more_suspect)->rank);
    std::copy_if(all.begin(), all.end(), std::back_inserter(tied),
                 [&](const Candidate& c) { return how_far(*c.rank) == furthest_behind; });
  }
  // A stopped process (SIGSTOP, a debugger's stop) holds every other; then the stacks; then a rank ddprun had
  // named a straggler before it went silent (issue 32): the others wait for it.
  const std::vector<Candidate> left = by_mark(by_stacks(by_mark(tied, &RankBeat::stopped)), &RankBeat::slow);
  const Candidate* chosen = by_silence(left);
  const RankBeat* suspect = chosen ? chosen->rank : nullptr;
  Failure f;
  f.kind = FailureKind::kHung;
  f.time_unix_ms = now_unix_ms;
  f.signal = SIGKILL;
  if (left.empty()) {  // nobody reported a running worker: the job is stopped, with no rank to blame
    f.signal.reset();  // no rank, no signal, no exit code: the job hung, and nobody is named (exit 78)
    f.message = heard_any ? "hung: a node reported a hung worker, but no rank's own node confirms it silent: "
                            "nobody is named"
                          : "hung: a worker stopped beating, but no node reported a running worker to judge";
    if (!views.empty()) {
      f.node_rank = views.front().node_rank;
      f.host = views.front().host;
    }
    return f;
  }

  // Evidence: where the others were, grouped by position ("ranks 0,2-3 at step 42").
  // (progress, never beat, stopped, stack seen, collective) → the ranks there, and one of them to say where
  std::map<std::tuple<std::int64_t, bool, bool, bool, bool, std::string>, std::pair<std::vector<int>, const RankBeat*>>
      others;
  std::vector<std::string> stacks;
  for (const NodeHangView& v : views) {
    // One node: its path; several: each prefixed with its host, where the file is.
    if (!v.view.stacks.empty()) stacks.push_back(views.size() == 1 ? v.view.stacks : v.host + ":" + v.view.stacks);
    for (const RankBeat& r : v.view.ranks)
      if (&r != suspect && (suspect || std::none_of(left.begin(), left.end(), [&](const Candidate& c) { return c.rank == &r; }))) {
        auto& group = others[{progress(r), r.never_beat, r.stopped, r.slow, r.python_stack, r.collective}];
        group.first.push_back(r.rank);
        group.second = &r;
      }
  }
  std::string evidence;
  std::size_t listed = 0;
  for (auto it = others.rbegin(); it != others.rend() && listed < kMaxStepsListed; ++it, ++listed) {
    evidence += (evidence.empty() ? "" : ", ") + rank_list(it->second.first, kMaxRunsListed) + " " +
                where(*it->second.second);
  }
  if (others.size() > kMaxStepsListed) evidence += ", and others";
  std::string stack_list;
  for (std::size_t i = 0; i < stacks.size(); ++i) stack_list += (i ? ", " : "") + stacks[i];

  if (!suspect) {
    // The evidence does not separate the ranks left: say so, and blame no one. The job still ends as hung (78);
    // every agent kills its silent workers with SIGKILL (agent/hang_inquiry.cpp).
    const Candidate& first = *std::min_element(left.begin(), left.end(), more_suspect);
    std::vector<int> ranks;
    for (const Candidate& c : left) ranks.push_back(c.rank->rank);
    f.node_rank = first.node->node_rank;
    f.host = first.node->host;
    f.rank = first.rank->rank;
    f.local_rank = first.rank->local_rank;
    f.pid = first.rank->pid;
    f.unsure = true;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", static_cast<double>(first.silent_ms()) / 1000.0);
    f.message = "hung: " + rank_list(ranks, kMaxRunsListed) + " silent for about " + secs + " " + where(*first.rank) +
                "; could not tell which one holds the others; killed with SIGKILL";
    if (!evidence.empty()) f.message += "; ranks seen: " + evidence;
    if (!stack_list.empty()) f.message += "; stacks in " + stack_list;
    if (f.message.size() > kMaxMessageBytes) f.message.resize(kMaxMessageBytes);
    return f;
  }
  f.node_rank = chosen->node->node_rank;
  f.host = chosen->node->host;
  f.rank = suspect->rank;
  f.local_rank = suspect->local_rank;
  f.pid = suspect->pid;
  if (!evidence.empty()) {
    const std::string self = rank_list({suspect->rank}) + " " + where(*suspect);
    evidence = self + " while " + evidence;
  }
  f.message = hang_message(chosen->silent_ms(), suspect->step, now_unix_ms - chosen->silent_ms(), stack_list,
                           suspect->never_beat, evidence, /*by_initial_timeout=*/suspect->hung);
  if (f.message.size() > kMaxMessageBytes) f.message.resize(kMaxMessageBytes);
  return f;
}

}  // namespace ddprun::rendezvous
