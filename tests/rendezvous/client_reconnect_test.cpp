// The client's part of a server restart (client_reconnect.hpp): when a lost resumable server is looked for, what
// the hello then says (a claim of the running round, or the last round between rounds), and when it may go.
#include <doctest/doctest.h>

#include "rendezvous/client_reconnect.hpp"

using namespace ddprun::rendezvous;
using namespace std::chrono_literals;

namespace {
Assignment round_number(int restart_count) {
  Assignment a;
  a.node_rank = 1;
  a.nnodes = 2;
  a.rank_offset = 2;
  a.world_size = 4;
  a.nprocs = {2, 2};
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.restart_count = restart_count;
  return a;
}

ddprun::Logger quiet(ddprun::LogLevel::kOff, "test", "");

// A client of a resumable server (10 s to come back) that was placed in round `restart_count`.
Reconnect placed_in(int restart_count) {
  Reconnect r(10s);
  r.on_challenge(true, 15s);
  r.on_assignment(round_number(restart_count));
  return r;
}
}  // namespace

TEST_SUITE("client reconnect") {
  TEST_CASE("a server that is not resumable, or no timeout, or no round run yet: the loss ends the client") {
    Reconnect hosted(10s);
    hosted.on_challenge(false, 15s);
    hosted.on_assignment(round_number(0));
    CHECK_FALSE(hosted.on_lost("connection closed", "x:1", quiet));
    Reconnect off(0s);
    off.on_challenge(true, 15s);
    off.on_assignment(round_number(0));
    CHECK_FALSE(off.on_lost("connection closed", "x:1", quiet));
    Reconnect unplaced(10s);
    unplaced.on_challenge(true, 15s);
    CHECK_FALSE(unplaced.on_lost("connection closed", "x:1", quiet));
  }

  TEST_CASE("an agent-hosted server fallen silent is asked again for its heartbeat timeout, never longer") {
    Reconnect hosted(60s);
    hosted.on_challenge(false, 3s);
    hosted.on_assignment(round_number(1));
    const auto before = std::chrono::steady_clock::now();
    REQUIRE(hosted.on_lost("nothing heard for 3.0 s", "x:1", quiet, /*silent=*/true));
    CHECK(hosted.claim().has_value());  // a resume hello: the server tells a node it judged lost
    CHECK(hosted.deadline() - before <= 3s + 100ms);
    CHECK(hosted.deadline() - before >= 3s - 100ms);
    CHECK(hosted.give_up("x:1", "refused").find("within 3.0 s") != std::string::npos);
    Reconnect shorter(1s);  // the reconnect timeout bounds it too
    shorter.on_challenge(false, 3s);
    shorter.on_assignment(round_number(0));
    REQUIRE(shorter.on_lost("nothing heard", "x:1", quiet, true));
    CHECK(shorter.deadline() - std::chrono::steady_clock::now() <= 1s);
    Reconnect between(60s);  // between rounds there is no verdict to ask for
    between.on_challenge(false, 3s);
    between.on_assignment(round_number(0));
    between.on_restart_ordered();
    CHECK_FALSE(between.on_lost("nothing heard", "x:1", quiet, true));
  }

  TEST_CASE("lost while the round runs: the hello claims it at once") {
    Reconnect r = placed_in(3);
    REQUIRE(r.on_lost("connection closed", "x:1", quiet));
    REQUIRE(r.claim().has_value());
    CHECK(r.claim()->restart_count == 3);
    CHECK_FALSE(r.after_round().has_value());
    CHECK_FALSE(r.waiting_for_workers());
  }

  TEST_CASE("lost between rounds with the workers down: a plain hello at once, after the last round") {
    Reconnect r = placed_in(2);
    r.on_restart_ordered();
    CHECK(r.note_sent(StoppedMsg{}, "frame"));  // connected: sent
    REQUIRE(r.on_lost("connection closed", "x:1", quiet));
    CHECK_FALSE(r.claim().has_value());
    CHECK(r.after_round() == 2);
    CHECK_FALSE(r.waiting_for_workers());
  }

  TEST_CASE("lost between rounds while the workers go down: the hello waits for 'stopped', which it replaces") {
    Reconnect r = placed_in(0);
    r.on_restart_ordered();
    REQUIRE(r.on_lost("connection closed", "x:1", quiet));
    CHECK(r.waiting_for_workers());
    CHECK_FALSE(r.note_sent(StoppedMsg{}, "frame"));  // not for the next server: the hello says it
    CHECK_FALSE(r.waiting_for_workers());
    CHECK(r.after_round() == 0);
    r.on_resumed("x:1", quiet);
    CHECK_FALSE(r.active());
    CHECK_FALSE(r.after_round().has_value());
  }

  TEST_CASE("told it was dropped while reconnecting: nothing of the round is kept") {
    Reconnect r = placed_in(1);
    CHECK(r.note_sent(FailureMsg{}, "failure-frame"));
    REQUIRE(r.on_lost("connection closed", "x:1", quiet));
    CHECK(r.replay().size() == 1);
    r.on_dropped();
    CHECK_FALSE(r.active());
    CHECK(r.replay().empty());
    CHECK_FALSE(r.claim().has_value());
  }
}
