// Straggler naming's rule (rendezvous/straggler_watch.hpp): who is named, when, by which measure, and when
// the name goes again.
#include <doctest/doctest.h>

#include "rendezvous/straggler_watch.hpp"

#include <algorithm>
#include <random>

using namespace ddprun::rendezvous;
using namespace std::chrono_literals;

namespace {
using Clock = StragglerWatch::Clock;
const Clock::time_point t0{};

RankPace pace(int rank, std::int64_t step_us, std::int64_t work_us = -1) { return RankPace{rank, step_us, work_us}; }

std::vector<int> named_ranks(const StragglerWatch& w) {
  std::vector<int> out;
  for (const Straggler& s : w.named()) out.push_back(s.rank);
  return out;
}
}  // namespace

TEST_CASE("a rank that works 50% longer per step is named after persist, with its pace and the others' median") {
  StragglerWatch w(StragglerRule{0.30, 10s});
  // Lockstep: equal step times, unequal work.
  w.report(0, "a", {pace(0, 150'000, 100'000), pace(1, 150'000, 150'000)});
  w.report(1, "b", {pace(2, 150'000, 100'000), pace(3, 150'000, 104'000)});
  CHECK_FALSE(w.judge(t0));
  CHECK_FALSE(w.judge(t0 + 9s));
  CHECK(w.judge(t0 + 10s));
  REQUIRE(named_ranks(w) == std::vector<int>{1});
  const Straggler& s = w.named().front();
  CHECK(s.node_rank == 0);
  CHECK(s.host == "a");
  CHECK(s.pace_us == 150'000);
  CHECK(s.median_us == 100'000);  // the median of ranks 0, 2, 3
  CHECK(s.work);
  CHECK_FALSE(w.judge(t0 + 15s));  // still named: no change to tell
}

TEST_CASE("a lockstep job without work reported is compared by step time and nobody is named") {
  StragglerWatch w(StragglerRule{0.30, 1s});
  w.report(0, "a", {pace(0, 150'000), pace(1, 150'000, 150'000)});  // one rank says its work, the other not
  for (auto t : {0s, 5s, 10s}) CHECK_FALSE(w.judge(t0 + t));
  CHECK(w.named().empty());
}

TEST_CASE("by step time: a rank that steps slower than the others is named") {
  StragglerWatch w(StragglerRule{0.30, 5s});
  w.report(0, "a", {pace(0, 50'000), pace(1, 100'000)});
  w.judge(t0);
  CHECK(w.judge(t0 + 5s));
  REQUIRE(named_ranks(w) == std::vector<int>{1});
  CHECK_FALSE(w.named().front().work);
}

TEST_CASE("in a job of two the slow rank is compared with the fast one, and the fast one is never named") {
  StragglerWatch w(StragglerRule{0.30, 1s});
  w.report(0, "a", {pace(0, 100, 100), pace(1, 100, 140)});  // +40%
  w.judge(t0);
  w.judge(t0 + 1s);
  CHECK(named_ranks(w) == std::vector<int>{1});
}

// Issue 33: an insider node reporting its own rank at 1 us per step pulled the mean of the two others down to half,
// and the honest ranks, balanced, were named (and with --straggler-action stop, one was SIGKILLed).
TEST_CASE("a minority's paces cannot make balanced ranks stragglers: the upper of the middle two others") {
  StragglerWatch w(StragglerRule{0.30, 1s});
  w.report(0, "a", {pace(0, 100'000, 100'000)});
  w.report(1, "b", {pace(1, 100'000, 100'000)});
  w.report(2, "insider", {pace(2, 1, 1)});  // its own rank only (own_paces), at 1 us per step
  w.judge(t0);
  w.judge(t0 + 1s);
  CHECK(named_ranks(w).empty());
  SUBCASE("a rank slower than more than half of the others still is named") {
    w.report(0, "a", {pace(0, 100'000, 140'000)});  // +40% over rank 1, the upper of {1 us, rank 1}
    w.judge(t0 + 2s);
    w.judge(t0 + 3s);
    CHECK(named_ranks(w) == std::vector<int>{0});
    REQUIRE(w.named().size() == 1);
    CHECK(w.named()[0].median_us == 100'000);
  }
}

TEST_CASE("one judgement under the line restarts the count") {
  StragglerWatch w(StragglerRule{0.30, 10s});
  w.report(0, "a", {pace(0, 100, 100), pace(1, 100, 150)});
  w.judge(t0);
  w.judge(t0 + 5s);
  w.report(0, "a", {pace(0, 100, 100), pace(1, 100, 120)});
  w.judge(t0 + 8s);
  w.report(0, "a", {pace(0, 100, 100), pace(1, 100, 150)});
  CHECK_FALSE(w.judge(t0 + 12s));
  CHECK_FALSE(w.judge(t0 + 21s));
  CHECK(w.judge(t0 + 22s));
}

TEST_CASE("the name goes once the rank stays within half the threshold for persist; in the margin it stays") {
  StragglerWatch w(StragglerRule{0.30, 10s});
  w.report(0, "a", {pace(0, 100, 100), pace(1, 100, 150)});
  w.judge(t0);
  REQUIRE(w.judge(t0 + 10s));
  w.report(0, "a", {pace(0, 100, 100), pace(1, 100, 120)});  // +20%: under the line, over the margin
  for (auto t : {15s, 30s, 60s}) CHECK_FALSE(w.judge(t0 + t));
  CHECK(named_ranks(w) == std::vector<int>{1});
  w.report(0, "a", {pace(0, 100, 100), pace(1, 100, 110)});  // +10%: back
  CHECK_FALSE(w.judge(t0 + 61s));
  CHECK(w.judge(t0 + 71s));
  CHECK(w.named().empty());
}

TEST_CASE("a node gone takes its ranks' names with it; a new round forgets everything") {
  StragglerWatch w(StragglerRule{0.30, 1s});
  w.report(0, "a", {pace(0, 100, 100)});
  w.report(1, "b", {pace(1, 100, 200)});
  w.judge(t0);
  REQUIRE(w.judge(t0 + 1s));
  w.forget_node(1);
  CHECK(w.judge(t0 + 2s));
  CHECK(w.named().empty());
  w.report(1, "b", {pace(1, 100, 200)});
  w.judge(t0 + 3s);
  w.clear();
  CHECK_FALSE(w.judge(t0 + 10s));
}

TEST_CASE("threshold 0 is off; one rank alone is never named") {
  StragglerWatch off(StragglerRule{0, 1s});
  off.report(0, "a", {pace(0, 100, 100), pace(1, 100, 1000)});
  off.judge(t0);
  CHECK_FALSE(off.judge(t0 + 5s));
  StragglerWatch alone(StragglerRule{0.30, 1s});
  alone.report(0, "a", {pace(0, 100, 100)});
  alone.judge(t0);
  CHECK_FALSE(alone.judge(t0 + 5s));
}

// Issue 32: a named straggler that stopped making steps (hung) left the node's paces, was unnamed, and the
// events said straggler_end (a recovery) while the live view went from "slow" back to "running".
TEST_CASE("a named straggler its node no longer reports stays named: it stopped, it did not recover") {
  StragglerWatch w(StragglerRule{0.30, 10s});
  w.report(0, "a", {pace(0, 150'000, 100'000), pace(1, 150'000, 150'000)});
  w.report(1, "b", {pace(2, 150'000, 100'000), pace(3, 150'000, 104'000)});
  CHECK_FALSE(w.judge(t0));
  CHECK(w.judge(t0 + 10s));
  REQUIRE(named_ranks(w) == std::vector<int>{1});
  w.report(0, "a", {pace(0, 150'000, 100'000)});  // rank 1 made too few steps in the window to be measured
  CHECK_FALSE(w.judge(t0 + 15s));
  CHECK(named_ranks(w) == std::vector<int>{1});
  CHECK_FALSE(w.judge(t0 + 60s));
  CHECK(named_ranks(w) == std::vector<int>{1});
  w.report(0, "a", {pace(0, 150'000, 100'000), pace(1, 150'000, 100'000)});  // back, and fast: goes after persist
  CHECK_FALSE(w.judge(t0 + 61s));
  CHECK(w.judge(t0 + 71s));
  CHECK(named_ranks(w).empty());
  CHECK(w.judge(t0 + 71s) == false);
  w.report(0, "a", {pace(0, 150'000, 100'000), pace(1, 150'000, 150'000)});
  w.judge(t0 + 80s);
  CHECK(w.judge(t0 + 90s));
  w.forget_node(0);  // its node gone: its name goes with it
  CHECK(w.judge(t0 + 91s));
  CHECK(named_ranks(w).empty());
}

TEST_CASE("own_paces keeps a node's own ranks, each once") {
  std::vector<RankPace> paces{{4, 1, -1}, {3, 1, -1}, {5, 1, -1}, {4, 2, -1}, {6, 1, -1}, {-1, 1, -1}, {1 << 30, 1, -1}};
  CHECK(own_paces(paces, 4, 2) == 5);
  REQUIRE(paces.size() == 2);
  CHECK(paces[0] == RankPace{4, 1, -1});
  CHECK(paces[1] == RankPace{5, 1, -1});
  std::vector<RankPace> unplaced{{0, 1, -1}};
  CHECK(own_paces(unplaced, -1, 0) == 1);  // a node not placed in a round owns no rank
}

// Issue 33: the judgement reads each rank's median of the others off one sorted list (O(R log R)) instead of
// sorting the others for every rank. The same names, paces and medians as that direct rule, on random jobs
// with ties, even and odd sizes, and both measures.
TEST_CASE("the sorted-list median names exactly whom the direct rule names") {
  std::mt19937 random(33);
  for (int trial = 0; trial < 300; ++trial) {
    const int nodes = 1 + static_cast<int>(random() % 6), per_node = 1 + static_cast<int>(random() % 4);
    const bool with_work = random() % 2 == 0;
    StragglerWatch watch({0.3, 0ms});
    std::vector<std::pair<int, std::int64_t>> values;  // rank, the value judged
    for (int n = 0; n < nodes; ++n) {
      std::vector<RankPace> paces;
      for (int l = 0; l < per_node; ++l) {
        const int rank = n * per_node + l;
        const std::int64_t v = 100 + static_cast<std::int64_t>(random() % 4) * 50;  // ties on purpose
        paces.push_back(with_work ? RankPace{rank, 1000, v} : RankPace{rank, v, -1});
        values.emplace_back(rank, v);
      }
      watch.report(n, "h" + std::to_string(n), paces);
    }
    watch.judge(std::chrono::steady_clock::time_point{} + 1s);
    std::vector<Straggler> expected;
    for (const auto& [rank, v] : values) {
      if (values.size() < 2) break;
      std::vector<std::int64_t> others;
      for (const auto& [r, o] : values)
        if (r != rank) others.push_back(o);
      std::sort(others.begin(), others.end());
      const std::size_t m = others.size();
      const double mid = static_cast<double>(others[m / 2]);  // the middle, or the upper of the middle two
      if (mid > 0 && static_cast<double>(v) > mid * 1.3)
        expected.push_back(Straggler{rank, rank / per_node, "h" + std::to_string(rank / per_node), v,
                                     static_cast<std::int64_t>(mid), with_work});
    }
    REQUIRE(watch.named().size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      CHECK(watch.named()[i].rank == expected[i].rank);
      CHECK(watch.named()[i].median_us == expected[i].median_us);
      CHECK(watch.named()[i].pace_us == expected[i].pace_us);
    }
  }
}
