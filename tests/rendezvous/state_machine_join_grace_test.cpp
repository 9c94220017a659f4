// Joining a world whose nodes all start together (a SLURM step): --join-grace, and a node's new connection
// taking the place of its own silent one. One test case per rule; the other joining rules: state_machine_join_test.
#include "common/error.hpp"
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

// --join-grace (a SLURM step's default): the nodes start together and none can be replaced.
namespace {

RendezvousState graced(int nnodes, std::chrono::milliseconds grace) {
  JobConfig config = job(nnodes, true);
  config.join_grace = grace;
  config.heartbeat_timeout = 30s;  // no node judged for its silence in these cases
  return RendezvousState(config, at(0ms).steady);
}

void join_rank(RendezvousState& state, int rank, std::chrono::milliseconds when, ConnId conn = 0) {
  Joiner j;
  j.conn = conn != 0 ? conn : static_cast<ConnId>(rank + 1);
  j.node_rank = rank;
  j.host = "host" + std::to_string(rank);
  step(state, hello(j), at(when));
}

}  // namespace

TEST_CASE("with a join grace, a place still empty that long after the last join ends the rendezvous") {
  // Node 2 never starts (a usage error, a task killed before ddprun ran): the others end 5 s after the last
  // join, not at the 60 s rendezvous timeout.
  RendezvousState state = graced(3, 5'000ms);
  join_rank(state, 0, 0ms);
  join_rank(state, 1, 1'000ms);
  REQUIRE(next_deadline(state) == at(6'000ms).steady);
  CHECK(find_all<Send>(step(state, Tick{}, at(5'999ms))).empty());
  auto actions = step(state, Tick{}, at(6'000ms));
  REQUIRE(find_all<Send>(actions).size() == 2);
  auto error = std::get<ErrorMsg>(find_all<Send>(actions).at(0).message);
  CHECK(error.kind == ErrorKind::kTimeout);
  CHECK(error.message ==
        "rendezvous ended: no node joined or left for 5.0 s (--join-grace: every node starts together, none can be "
        "replaced): 2 of 3 nodes joined; missing node ranks 2");
  CHECK(find_all<Close>(actions).size() == 2);
  CHECK(state.phase == Phase::kStopped);
  CHECK(!next_deadline(state));
}

TEST_CASE("with a join grace, a node that dies after joining ends the rendezvous a grace after it left") {
  // Before, the server kept its place for a replacement until the rendezvous timeout; in a SLURM step none
  // can come. The node's own words are kept: it joined, then left.
  RendezvousState state = graced(3, 5'000ms);
  join_rank(state, 0, 0ms);
  join_rank(state, 1, 500ms);
  step(state, Disconnected{2, "connection reset"}, at(2'000ms));
  CHECK(find_all<Send>(step(state, Tick{}, at(6'999ms))).empty());
  auto error = std::get<ErrorMsg>(find_all<Send>(step(state, Tick{}, at(7'000ms))).at(0).message);
  CHECK(error.message.find("missing node ranks 1, 2; node 1 (host \"host1\", 10.0.0.9) joined, then left "
                           "(connection closed (connection reset))") != std::string::npos);
}

TEST_CASE("with a join grace, a node that comes back in time, and a round that forms, end nothing") {
  RendezvousState state = graced(2, 5'000ms);
  join_rank(state, 0, 0ms);
  join_rank(state, 1, 1'000ms);  // the round forms: the grace is over
  CHECK(state.phase == Phase::kRunning);
  CHECK(!state.join_grace_deadline);
  RendezvousState flapping = graced(3, 5'000ms);
  join_rank(flapping, 0, 0ms);
  join_rank(flapping, 1, 0ms);
  step(flapping, Disconnected{2, "connection reset"}, at(4'000ms));
  join_rank(flapping, 1, 8'000ms, 9);  // back 4 s after leaving: each join or departure starts the grace again
  CHECK(find_all<Send>(step(flapping, Tick{}, at(12'999ms))).empty());
  CHECK(flapping.phase == Phase::kJoining);
  join_rank(flapping, 2, 12'999ms);
  CHECK(flapping.phase == Phase::kRunning);
}

TEST_CASE("without a join grace the rendezvous waits for a replacement until its timeout, as before") {
  RendezvousState state = graced(3, 0ms);
  join_rank(state, 0, 0ms);
  join_rank(state, 1, 0ms);
  for (int s = 1; s <= 59; ++s) {
    step(state, Heartbeat{1}, at(std::chrono::seconds(s)));
    step(state, Heartbeat{2}, at(std::chrono::seconds(s)));
    step(state, Tick{}, at(std::chrono::seconds(s)));
  }
  CHECK(state.phase == Phase::kJoining);
  CHECK(!state.join_grace_deadline);
}

TEST_CASE("a join grace needs a fixed node count") {
  JobConfig config = job(3, false);
  config.min_nodes = 2;
  config.join_grace = 5'000ms;
  CHECK_THROWS_WITH(validate(config), doctest::Contains("--join-grace needs a fixed node count"));
  config.min_nodes = 3;
  CHECK_NOTHROW(validate(config));
  config.join_grace = -1ms;
  CHECK_THROWS_WITH(validate(config), doctest::Contains("--join-grace must not be negative"));
}

TEST_CASE("a node's new hello takes its place back from its own silent connection, never from a live one") {
  // A lossy link: node 1's agent heard nothing during the handshake, gave the connection up and connected again;
  // its reset never arrived. Before, the new hello was refused as a duplicate node rank (or, dynamic, counted
  // as a second node).
  RendezvousState state(job(3, true), at(0ms).steady);  // heartbeat timeout 5 s
  join_rank(state, 0, 0ms);
  join_rank(state, 1, 0ms);
  for (int s = 1; s <= 3; ++s) step(state, Heartbeat{1}, at(std::chrono::seconds(s)));
  // After 2 s of silence (less than half the timeout): node 1's place is not given away.
  Joiner again;
  again.conn = 7;
  again.node_rank = 1;
  again.host = "host1";
  CHECK(refusal(step(state, hello(again), at(2'000ms)), 7).find("duplicate node rank 1") == 0);
  // Silent 3 s (half the timeout): the new connection takes the place; the old one is closed.
  again.conn = 8;
  auto actions = step(state, hello(again), at(3'000ms));
  CHECK(refusal(actions, 8).empty());
  CHECK(closes(actions, 2));
  CHECK(state.nodes.count(8) == 1);
  CHECK(state.nodes.count(2) == 0);
  // Another host's claim on a silent rank is still a duplicate.
  Joiner other;
  other.conn = 9;
  other.node_rank = 0;
  other.host = "elsewhere";
  CHECK(refusal(step(state, hello(other), at(9'000ms)), 9).find("duplicate node rank 0") == 0);
}

TEST_CASE("dynamic ranks: a host's new hello replaces its own silent connection, found by host, not by a scan") {
  // The host index (RendezvousState::by_host) stands for the scan of every node that made a 10k-node join O(n²):
  // same verdicts, including for a host whose earlier connection left, and a host of two live agents.
  RendezvousState state(job(4, false), at(0ms).steady);  // heartbeat timeout 5 s
  auto join = [&](ConnId conn, const std::string& host, std::chrono::milliseconds when) {
    Joiner j;
    j.conn = conn;
    j.host = host;
    return step(state, hello(j), at(when));
  };
  join(1, "a", 0ms);
  join(2, "b", 0ms);
  step(state, Disconnected{2, "end of stream"}, at(100ms));  // b's first connection left: its entry is stale
  join(3, "b", 200ms);
  CHECK(state.nodes.size() == 2);
  for (int s = 1; s <= 3; ++s) step(state, Heartbeat{3}, at(std::chrono::seconds(s)));
  // b beats, a fell silent for 3 s (half the timeout): a's new hello takes a's place, b's is untouched.
  auto actions = join(4, "a", 3'000ms);
  CHECK(closes(actions, 1));
  CHECK_FALSE(closes(actions, 3));
  CHECK(state.nodes.count(1) == 0);
  CHECK(state.nodes.count(4) == 1);
  // A second agent of host b, while b's first one beats: two nodes, nobody replaced.
  actions = join(5, "b", 3'000ms);
  CHECK_FALSE(closes(actions, 3));
  CHECK(state.nodes.size() == 3);
  // The index keeps to the nodes there are (stale entries dropped when met, or at a rebuild).
  CHECK(state.by_host.size() <= 2 * state.nodes.size() + 64);
}

TEST_CASE("a silent node is replaced only by a hello with its own seat, not by another agent naming its host") {
  for (bool static_ranks : {true, false}) {
    CAPTURE(static_ranks);
    RendezvousState state(job(3, static_ranks), at(0ms).steady);  // heartbeat timeout 5 s
    auto join = [&](ConnId conn, const std::string& secret, std::chrono::milliseconds when) {
      Joiner j;
      j.conn = conn;
      if (static_ranks) j.node_rank = 0;
      j.host = "a";
      j.seat_secret = secret;
      return step(state, hello(j), at(when));
    };
    join(1, std::string(64, '1'), 0ms);
    // Silent 3 s (half the timeout). Another agent of the job names host "a" (an insider can name any): it
    // joins beside it, or is a duplicate of its static rank; node 1 is not replaced.
    auto other = join(2, std::string(64, '2'), 3'000ms);
    CHECK_FALSE(closes(other, 1));
    CHECK(state.nodes.count(1) == 1);
    if (static_ranks) CHECK(refusal(other, 2).find("duplicate node rank 0") == 0);
    // Its own agent, connecting again with the same seat: the old connection goes.
    auto own = join(3, std::string(64, '1'), 3'100ms);
    CHECK(closes(own, 1));
    CHECK(state.nodes.count(3) == 1);
  }
}
