// A host elected in etcd whose lease is lapsing (state_machine_lease.cpp, issue 53 invariant 2): its running round
// goes on only while every node of it is heard. Heartbeat interval 1 s, timeout 15 s: a lapsing host loses a node
// silent for 3 s (lapse_silence), where it would wait 15 s otherwise.
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {

// Three nodes (conns 1..3, hosts host0..2) of a job, node 0's agent hosting the server (as an elected host does):
// a fixed-size job of static ranks, or an elastic 1:3 one.
RendezvousState hosted(bool elastic) {
  JobConfig config = job(3, !elastic);
  if (elastic) config.min_nodes = 1;
  config.heartbeat_timeout = 15s;
  config.resumable = true;  // an elected host's server is one its nodes come back to
  config.reconnect_grace = 30s;
  RendezvousState state(config, at(0ms).steady);
  for (int i = 0; i < 3; ++i) {
    Joiner j;
    j.conn = static_cast<ConnId>(i + 1);
    if (!elastic) j.node_rank = i;
    j.host = "host" + std::to_string(i);
    Hello h = hello(j);
    h.hello.hosts_server = i == 0;
    step(state, h, at(0ms));
  }
  if (state.phase == Phase::kJoining) step(state, Tick{}, at(10'000ms));  // an elastic job's last call
  REQUIRE(state.phase == Phase::kRunning);
  return state;
}

// The nodes beat every second from `from_s` to `to_s`, then the clock ticks; node 2 (conn 3) only while
// `node2_beats`, node 0 (conn 1, the host's own) only while `host_beats`.
void beat(RendezvousState& state, int from_s, int to_s, bool node2_beats = true, bool host_beats = true) {
  for (int s = from_s; s <= to_s; ++s) {
    const auto now = at(std::chrono::milliseconds(s * 1000));
    if (host_beats) step(state, Heartbeat{1}, now);
    step(state, Heartbeat{2}, now);
    if (node2_beats) step(state, Heartbeat{3}, now);
    step(state, Tick{}, now);
  }
}

}  // namespace

TEST_CASE("a lapsing host stops a fixed-size round at a node's 3 s silence, naming it; renewed, it waits 15 s again") {
  auto state = hosted(/*elastic=*/false);
  beat(state, 1, 2, true, /*host_beats=*/false);
  // Lapsing with every node heard: nothing happens (etcd down mid-training costs nothing).
  auto lapse = step(state, LeaseStanding{true}, at(2'000ms));
  CHECK(state.phase == Phase::kRunning);
  CHECK(find_all<Broadcast>(lapse).empty());
  // Node 2 falls silent after 2 s; node 0, the host's own node, falls silent too and is never judged by the lapse
  // (it is this server's own agent: its silence is no other side's).
  beat(state, 3, 4, /*node2_beats=*/false, /*host_beats=*/false);
  CHECK(state.phase == Phase::kRunning);
  REQUIRE(next_deadline(state));
  CHECK(*next_deadline(state) <= at(5'000ms).steady);  // the lapse's deadline: node 2's last word + 3 s
  step(state, Heartbeat{2}, at(4'900ms));
  step(state, Heartbeat{1}, at(4'900ms));
  auto stop = step(state, Tick{}, at(5'000ms));
  CHECK(state.phase == Phase::kStopped);
  REQUIRE(state.root_cause);
  CHECK(state.root_cause->kind == FailureKind::kNodeLost);
  CHECK(state.root_cause->node_rank == 2);  // not node 0, silent longer
  CHECK(state.root_cause->message.find("while etcd could not renew the host's lease") != std::string::npos);
  CHECK_FALSE(find_all<Broadcast>(stop).empty());

  // The same silence with the lease renewed again is judged at the heartbeat timeout, as ever.
  auto renewed = hosted(/*elastic=*/false);
  beat(renewed, 1, 2);
  step(renewed, LeaseStanding{true}, at(2'000ms));
  step(renewed, LeaseStanding{false}, at(2'500ms));
  beat(renewed, 3, 16, /*node2_beats=*/false);
  CHECK(renewed.phase == Phase::kRunning);
  beat(renewed, 17, 17, /*node2_beats=*/false);
  CHECK(renewed.phase == Phase::kStopped);
  CHECK(renewed.root_cause->message.find("missed heartbeats for 15.0 s") != std::string::npos);
}

TEST_CASE("a node already silent when the lease lapses is lost at once; a lapsing elastic round re-forms, fenced") {
  auto state = hosted(/*elastic=*/true);
  beat(state, 11, 12);
  beat(state, 13, 16, /*node2_beats=*/false);  // node 2 silent 4 s: under the 15 s timeout, still in the round
  REQUIRE(state.phase == Phase::kRunning);
  auto actions = step(state, LeaseStanding{true}, at(16'000ms));
  // An elastic job re-forms without it (no round is handed out before the host renews its lease: the server's
  // gate), and no round starts before the node's own agent has surely stopped its workers (the fence).
  CHECK(state.phase == Phase::kRestarting);
  CHECK(state.nodes.count(3) == 0);
  REQUIRE(state.fenced_until);
  CHECK(*state.fenced_until > at(16'000ms).steady);
  CHECK(final_stop_to(actions, 3).find("while etcd could not renew the host's lease") != std::string::npos);
}

TEST_CASE("lapsing is judged only while a round runs: a gathering rendezvous and the host's own node are left alone") {
  JobConfig config = job(2, true);
  config.heartbeat_timeout = 15s;
  RendezvousState state(config, at(0ms).steady);
  Joiner j;
  j.node_rank = 0;
  step(state, hello(j), at(0ms));
  step(state, LeaseStanding{true}, at(1'000ms));
  step(state, Tick{}, at(10'000ms));  // node 0 silent 10 s while the rendezvous waits for node 1
  CHECK(state.phase == Phase::kJoining);
  CHECK(state.nodes.size() == 1);
}
