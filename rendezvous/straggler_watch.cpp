#include "rendezvous/straggler_watch.hpp"

#include <algorithm>
#include <set>

namespace ddprun::rendezvous {

namespace {
template <typename Map, typename Pred>
void erase_where(Map& map, Pred pred) {
  for (auto it = map.begin(); it != map.end();) it = pred(*it) ? map.erase(it) : std::next(it);
}

// The median of `values` (not empty); the mean of the middle two for an even count.
double median(std::vector<std::int64_t> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? static_cast<double>(values[n / 2])
                    : (static_cast<double>(values[n / 2 - 1]) + static_cast<double>(values[n / 2])) / 2;
}
}  // namespace

void StragglerWatch::report(int node_rank, const std::string& host, const std::vector<RankPace>& paces) {
  erase_where(ranks_, [&](const auto& entry) { return entry.second.node_rank == node_rank; });
  nodes_.insert(node_rank);
  for (const RankPace& p : paces) ranks_[p.rank] = Entry{node_rank, host, p};
}

void StragglerWatch::forget_node(int node_rank) {
  erase_where(ranks_, [&](const auto& entry) { return entry.second.node_rank == node_rank; });
  nodes_.erase(node_rank);
}

void StragglerWatch::clear() {
  ranks_.clear();
  over_since_.clear();
  under_since_.clear();
  named_.clear();
  nodes_.clear();
}

bool StragglerWatch::judge(Clock::time_point now) {
  std::set<int> before;
  for (const Straggler& s : named_) before.insert(s.rank);
  std::vector<Straggler> named;
  const bool by_work = std::all_of(ranks_.begin(), ranks_.end(), [](const auto& e) { return e.second.pace.work_us >= 0; });
  auto value = [&](const Entry& e) { return by_work ? e.pace.work_us : e.pace.step_us; };
  const bool judged = rule_.enabled() && ranks_.size() >= 2;
  for (const auto& [rank, entry] : ranks_) {
    if (!judged) break;
    std::vector<std::int64_t> others;
    for (const auto& [other, e] : ranks_)
      if (other != rank) others.push_back(value(e));
    const double mid = median(std::move(others));
    const double pace = static_cast<double>(value(entry));
    const bool over = mid > 0 && pace > mid * (1 + rule_.threshold);
    const bool back = pace <= mid * (1 + rule_.threshold / 2);
    const bool was_named = before.count(rank) > 0;
    if (over) over_since_.try_emplace(rank, now);
    else over_since_.erase(rank);
    if (was_named && back) under_since_.try_emplace(rank, now);
    else under_since_.erase(rank);
    const bool named_now = was_named ? !(under_since_.count(rank) && now - under_since_[rank] >= rule_.persist)
                                     : over_since_.count(rank) && now - over_since_[rank] >= rule_.persist;
    if (named_now)
      named.push_back(Straggler{rank, entry.node_rank, entry.host, value(entry), static_cast<std::int64_t>(mid), by_work});
  }
  // Ranks no longer reported are no longer judged. A named one whose node still reports stays named (issue 32: a
  // straggler that stopped making steps was said to have recovered, and the live view went back to "running"
  // while it hung); one whose node is gone goes with it.
  for (const Straggler& s : named_)
    if (!ranks_.count(s.rank) && nodes_.count(s.node_rank)) named.push_back(s);
  std::sort(named.begin(), named.end(), [](const Straggler& a, const Straggler& b) { return a.rank < b.rank; });
  erase_where(over_since_, [&](const auto& e) { return !ranks_.count(e.first); });
  erase_where(under_since_, [&](const auto& e) { return !ranks_.count(e.first); });
  named_ = std::move(named);
  std::set<int> after;
  for (const Straggler& s : named_) after.insert(s.rank);
  return after != before;
}

}  // namespace ddprun::rendezvous
