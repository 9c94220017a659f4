#include "rendezvous/straggler_watch.hpp"

#include <algorithm>
#include <set>

namespace ddprun::rendezvous {

namespace {
template <typename Map, typename Pred>
void erase_where(Map& map, Pred pred) {
  for (auto it = map.begin(); it != map.end();) it = pred(*it) ? map.erase(it) : std::next(it);
}

// The median of `sorted` (ascending, at least 2 values) without one occurrence of `value`, which it holds: for
// an even count the upper (slower) of the middle two, not their mean (issue 33: in a job of three, one insider
// reporting its own rank at 1 us per step halved the mean of the two others an honest rank is compared with, and
// got it named and, under --straggler-action stop, killed). So a rank is named only when it is slower than more
// than half of the others: lies about a minority of the ranks cannot move the line. O(log n).
double median_of_others(const std::vector<std::int64_t>& sorted, std::int64_t value) {
  const auto gone = static_cast<std::size_t>(std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
  const std::size_t k = (sorted.size() - 1) / 2;  // among the others: the middle, or the upper of the middle two
  return static_cast<double>(sorted[k < gone ? k : k + 1]);
}

struct Judged {
  int rank;
  int node_rank;
  const std::string* host;
  std::int64_t value;
};
}  // namespace

std::size_t own_paces(std::vector<RankPace>& paces, int first, int count) {
  const std::size_t before = paces.size();
  std::vector<bool> seen(static_cast<std::size_t>(std::max(count, 0)), false);
  paces.erase(std::remove_if(paces.begin(), paces.end(),
                             [&](const RankPace& p) {
                               if (p.rank < first || p.rank - first >= count) return true;
                               const auto at = static_cast<std::size_t>(p.rank - first);
                               if (seen[at]) return true;
                               seen[at] = true;
                               return false;
                             }),
              paces.end());
  return before - paces.size();
}

void StragglerWatch::report(int node_rank, const std::string& host, std::vector<RankPace> paces) {
  NodeReport& node = nodes_[node_rank];
  node.host = host;
  node.paces = std::move(paces);
}

void StragglerWatch::forget_node(int node_rank) { nodes_.erase(node_rank); }

void StragglerWatch::clear() {
  over_since_.clear();
  under_since_.clear();
  named_.clear();
  nodes_.clear();
}

bool StragglerWatch::judge(Clock::time_point now) {
  std::set<int> before;
  for (const Straggler& s : named_) before.insert(s.rank);
  bool by_work = true;  // the measure: work per step when every rank says its work
  std::size_t total = 0;
  for (const auto& [node_rank, node] : nodes_) {
    total += node.paces.size();
    for (const RankPace& p : node.paces) by_work = by_work && p.work_us >= 0;
  }
  std::vector<Judged> ranks;
  ranks.reserve(total);
  for (const auto& [node_rank, node] : nodes_)
    for (const RankPace& p : node.paces)
      ranks.push_back(Judged{p.rank, node_rank, &node.host, by_work ? p.work_us : p.step_us});
  std::stable_sort(ranks.begin(), ranks.end(), [](const Judged& a, const Judged& b) { return a.rank < b.rank; });
  ranks.erase(std::unique(ranks.begin(), ranks.end(), [](const Judged& a, const Judged& b) { return a.rank == b.rank; }),
              ranks.end());
  std::vector<std::int64_t> sorted;
  sorted.reserve(ranks.size());
  for (const Judged& r : ranks) sorted.push_back(r.value);
  std::sort(sorted.begin(), sorted.end());
  auto reported = [&](int rank) {
    return std::binary_search(ranks.begin(), ranks.end(), Judged{rank, 0, nullptr, 0},
                              [](const Judged& a, const Judged& b) { return a.rank < b.rank; });
  };

  std::vector<Straggler> named;
  const bool judged = rule_.enabled() && ranks.size() >= 2;
  for (const Judged& r : ranks) {
    if (!judged) break;
    const double mid = median_of_others(sorted, r.value);
    const double pace = static_cast<double>(r.value);
    const bool over = mid > 0 && pace > mid * (1 + rule_.threshold);
    const bool back = pace <= mid * (1 + rule_.threshold / 2);
    const bool was_named = before.count(r.rank) > 0;
    if (over) over_since_.try_emplace(r.rank, now);
    else over_since_.erase(r.rank);
    if (was_named && back) under_since_.try_emplace(r.rank, now);
    else under_since_.erase(r.rank);
    const auto under = under_since_.find(r.rank);
    const auto over_at = over_since_.find(r.rank);
    const bool named_now = was_named ? !(under != under_since_.end() && now - under->second >= rule_.persist)
                                     : over_at != over_since_.end() && now - over_at->second >= rule_.persist;
    if (named_now)
      named.push_back(Straggler{r.rank, r.node_rank, *r.host, r.value, static_cast<std::int64_t>(mid), by_work});
  }
  // Ranks no longer reported are no longer judged. A named one whose node still reports stays named (issue 32: a
  // straggler that stopped making steps was said to have recovered, and the live view went back to "running"
  // while it hung); one whose node is gone goes with it.
  for (const Straggler& s : named_)
    if (!reported(s.rank) && nodes_.count(s.node_rank)) named.push_back(s);
  std::sort(named.begin(), named.end(), [](const Straggler& a, const Straggler& b) { return a.rank < b.rank; });
  erase_where(over_since_, [&](const auto& e) { return !reported(e.first); });
  erase_where(under_since_, [&](const auto& e) { return !reported(e.first); });
  named_ = std::move(named);
  std::set<int> after;
  for (const Straggler& s : named_) after.insert(s.rank);
  return after != before;
}

}  // namespace ddprun::rendezvous
