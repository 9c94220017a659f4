// Straggler naming's rule (rendezvous/straggler_watch.hpp): who is named, when, by which measure, and when
// the name goes again.
#include <doctest/doctest.h>

#include "rendezvous/straggler_watch.hpp"

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
