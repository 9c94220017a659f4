// Start failures (rendezvous/state_machine_start.cpp): a node that cannot take part ends a job of fixed size
// before its first round, every node learns why, and nothing else can use the way in.
#include "state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {

Hello cannot_join(ConnId conn, int node_rank, const std::string& why, const std::string& token = "tok") {
  Joiner j;
  j.conn = conn;
  j.node_rank = node_rank;
  j.host = "n" + std::to_string(node_rank + 1);
  j.token = token;
  Hello h = hello(j);
  h.hello.cannot_join = why;
  return h;
}

Hello static_hello(ConnId conn, int node_rank) {
  Joiner j;
  j.conn = conn;
  j.node_rank = node_rank;
  j.host = "n" + std::to_string(node_rank + 1);
  return hello(j);
}

}  // namespace

TEST_CASE("a node that cannot join ends a static job still gathering: every joined node is stopped with its reason") {
  RendezvousState state(job(3, true), at(0ms).steady);
  step(state, static_hello(1, 0), at(0ms));
  auto actions = step(state, cannot_join(2, 1, "munged is down"), at(5ms));
  CHECK(state.phase == Phase::kStopped);
  REQUIRE(state.root_cause);
  CHECK(is_start_failure(*state.root_cause));
  CHECK(exit_status_of(*state.root_cause) == 69);
  CHECK(describe(*state.root_cause) == "node 1 (host n2) could not start: munged is down");
  const auto stop = find_one<Broadcast>(actions);
  CHECK(stop.conns == std::vector<ConnId>{1});
  CHECK(closes(actions, 2));
  // Node 0 (joined) and node 1 (the failing one) know; node 2 does not yet.
  CHECK_FALSE(every_node_informed(state));
  actions = step(state, static_hello(3, 2), at(9ms));
  CHECK(refusal(actions, 3) == "the job ended before this node joined: node 1 (host n2) could not start: munged is down");
  CHECK(find_all<Send>(actions).size() == 1);
  CHECK(std::get<ErrorMsg>(find_one<Send>(actions).message).kind == ErrorKind::kUnavailable);
  CHECK(every_node_informed(state));
}

TEST_CASE("a cannot-join hello must prove the token and run id; with them it needs no MUNGE credential") {
  JobConfig config = job(2, true);
  config.require_munge = true;
  RendezvousState state(config, at(0ms).steady);
  auto actions = step(state, cannot_join(1, 1, "munged is down", "wrong"), at(0ms));
  CHECK(refusal(actions, 1).find("authentication failed") != std::string::npos);
  CHECK(state.phase == Phase::kJoining);
  actions = step(state, cannot_join(2, 1, "munged is down"), at(1ms));
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("once running, or in an elastic job, a node that cannot join is only logged") {
  RendezvousState state = running(2);
  auto actions = step(state, cannot_join(9, 1, "munged is down"), at(1s));
  CHECK(state.phase == Phase::kRunning);
  CHECK(closes(actions, 9));
  CHECK(find_one<Log>(actions).text.find("could not start: munged is down; the job goes on without it") !=
        std::string::npos);

  JobConfig elastic = job(3, false);
  elastic.min_nodes = 1;
  RendezvousState gathering(elastic, at(0ms).steady);
  Hello h = hello(Joiner{});
  h.hello.cannot_join = "munged is down";
  actions = step(gathering, h, at(0ms));
  CHECK(gathering.phase == Phase::kJoining);
  CHECK(find_one<Log>(actions).text.find("the job gathers without it") != std::string::npos);
}

TEST_CASE("node 0 that cannot start: its server tells each node that comes, and knows when all were told") {
  RendezvousState state(job(3, true), at(0ms).steady);
  Failure f;
  f.kind = FailureKind::kCannotStart;
  f.node_rank = 0;
  f.host = "n1";
  f.exit_code = 69;
  f.message = "--rdzv-auth munge: munged is down";
  step(state, CannotStart{f}, at(0ms));
  CHECK(state.phase == Phase::kStopped);
  CHECK_FALSE(every_node_informed(state));
  auto actions = step(state, static_hello(1, 1), at(3ms));
  CHECK(refusal(actions, 1) ==
        "the job ended before this node joined: node 0 (host n1) could not start: --rdzv-auth munge: munged is down");
  CHECK_FALSE(every_node_informed(state));
  // Another job's node is refused as always: no word of this one's failure.
  Joiner stranger;
  stranger.conn = 2;
  stranger.node_rank = 2;
  stranger.run_id = "other";
  actions = step(state, hello(stranger), at(4ms));
  CHECK(refusal(actions, 2).find("authentication failed") != std::string::npos);
  actions = step(state, static_hello(3, 2), at(5ms));
  CHECK(refusal(actions, 3).find("could not start") != std::string::npos);
  CHECK(every_node_informed(state));
}

TEST_CASE("a job stopped by anything else refuses late nodes as before") {
  RendezvousState state = running(2);
  Failure f;
  f.rank = 0;
  f.local_rank = 0;
  f.node_rank = 0;
  f.exit_code = 1;
  step(state, FailureReport{1, f}, at(1s));
  REQUIRE(state.phase == Phase::kStopped);
  auto actions = step(state, static_hello(7, 1), at(2s));
  CHECK(refusal(actions, 7).find("is closed") != std::string::npos);
}
