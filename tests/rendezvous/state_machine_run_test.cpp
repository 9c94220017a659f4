// Rules of a running job: liveness, failures, completion and restart rounds, one test case per rule.
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {
Failure worker_failure(int rank, int code, std::int64_t time_ms = 5) {
  Failure f;
  f.node_rank = 99;  // wrong on purpose: the server knows better
  f.rank = rank;
  f.local_rank = rank % 2;
  f.pid = 1000 + rank;
  f.exit_code = code;
  f.time_unix_ms = time_ms;
  return f;
}
}  // namespace

TEST_CASE("a heartbeat is answered and pushes the node's deadline back") {
  auto state = running(2);
  auto actions = step(state, Heartbeat{1}, at(4'000ms));
  REQUIRE(find_all<Send>(actions).size() == 1);
  CHECK(std::holds_alternative<HeartbeatAckMsg>(find_one<Send>(actions).message));
  step(state, Heartbeat{2}, at(4'000ms));
  CHECK(find_all<Broadcast>(step(state, Tick{}, at(8'999ms))).empty());
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("a node silent past the heartbeat timeout during the job stops every node") {
  auto state = running(3);
  step(state, Heartbeat{1}, at(3'000ms));
  step(state, Heartbeat{3}, at(3'000ms));
  CHECK(find_all<Broadcast>(step(state, Tick{}, at(4'999ms))).empty());
  auto actions = step(state, Tick{}, at(5'000ms));
  auto stop = find_one<Broadcast>(actions);
  CHECK(stop.conns == std::vector<ConnId>{1, 3});
  auto& cause = std::get<StopMsg>(stop.message).root_cause;
  CHECK(cause.node_rank == 1);
  CHECK(cause.host == "host1");
  CHECK(cause.is_node_failure());
  CHECK(cause.message == "missed heartbeats for 5.0 s");
  CHECK(closes(actions, 2));
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("a node silent before the rendezvous completes is only dropped") {
  RendezvousState state(job(3, true), at(0ms).steady);
  join_all(state, 2, at(0ms));
  step(state, Heartbeat{1}, at(4'000ms));
  auto actions = step(state, Tick{}, at(5'000ms));
  CHECK(find_all<Broadcast>(actions).empty());
  CHECK(closes(actions, 2));
  CHECK(state.nodes.size() == 1);
  CHECK(state.phase == Phase::kJoining);
}

TEST_CASE("a closed connection during the job is a node failure that stops every node") {
  auto state = running(2);
  auto stop = find_one<Broadcast>(step(state, Disconnected{1, "end of file"}, at(100ms)));
  CHECK(stop.conns == std::vector<ConnId>{2});
  auto& msg = std::get<StopMsg>(stop.message);
  CHECK(describe(msg.root_cause) == "node 0 (host host0) lost: connection closed (end of file)");
  CHECK(msg.root_cause.time_unix_ms == at(100ms).unix_ms);
  CHECK_FALSE(msg.restarting);
}

TEST_CASE("a worker failure stops every node, the reporter included, with it as root cause") {
  auto state = running(3);
  auto stop = find_one<Broadcast>(step(state, FailureReport{2, worker_failure(3, 7)}, at(10ms)));
  CHECK(stop.conns == std::vector<ConnId>{1, 2, 3});
  auto& msg = std::get<StopMsg>(stop.message);
  CHECK(msg.root_cause.rank == 3);
  CHECK(msg.root_cause.exit_code == std::optional<int>(7));
  CHECK(state.phase == Phase::kStopped);
  CHECK(state.root_cause == msg.root_cause);
}

TEST_CASE("the server's node rank and host override those in a failure report") {
  auto state = running(2);
  auto stop = find_one<Broadcast>(step(state, FailureReport{2, worker_failure(2, 1)}, at(10ms)));
  auto& cause = std::get<StopMsg>(stop.message).root_cause;
  CHECK(cause.node_rank == 1);
  CHECK(cause.host == "host1");
}

TEST_CASE("only the first failure is the root cause; later ones are ignored as victims") {
  auto state = running(2);
  step(state, FailureReport{1, worker_failure(0, 1)}, at(10ms));
  auto actions = step(state, FailureReport{2, worker_failure(2, 143)}, at(11ms));
  CHECK(find_all<Broadcast>(actions).empty());
  CHECK(state.root_cause->rank == 0);
}

TEST_CASE("the job completes when every node reported done, each counted once") {
  auto state = running(2);
  CHECK(find_all<Broadcast>(step(state, NodeDone{1}, at(10ms))).empty());
  CHECK(find_all<Broadcast>(step(state, NodeDone{1}, at(11ms))).empty());
  auto done = find_one<Broadcast>(step(state, NodeDone{2}, at(12ms)));
  CHECK(std::holds_alternative<CompleteMsg>(done.message));
  CHECK(done.conns == std::vector<ConnId>{1, 2});
  CHECK(state.phase == Phase::kComplete);
}

TEST_CASE("disconnects after the job ended change nothing") {
  auto state = running(2);
  step(state, NodeDone{1}, at(10ms));
  step(state, NodeDone{2}, at(10ms));
  CHECK(find_all<Broadcast>(step(state, Disconnected{1, ""}, at(20ms))).empty());
  CHECK(find_all<Broadcast>(step(state, Tick{}, at(60'000ms))).empty());
  CHECK(state.phase == Phase::kComplete);
}

TEST_CASE("a failure before the rendezvous completed stops the nodes that joined") {
  RendezvousState state(job(3, true), at(0ms).steady);
  join_all(state, 2, at(0ms));
  auto stop = find_one<Broadcast>(step(state, FailureReport{1, worker_failure(0, 2)}, at(1ms)));
  CHECK(stop.conns == std::vector<ConnId>{1, 2});
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("a worker failure with restarts left starts a restart round") {
  auto state = running(2, 1);
  auto stop = find_one<Broadcast>(step(state, FailureReport{2, worker_failure(2, 1)}, at(10ms)));
  auto& msg = std::get<StopMsg>(stop.message);
  CHECK(msg.restarting);
  CHECK(msg.reason == "restarting the job (restart 1 of 1)");
  CHECK(state.phase == Phase::kRestarting);
}

TEST_CASE("the next round starts once every node stopped, with the restart count incremented") {
  auto state = running(2, 2);
  step(state, FailureReport{2, worker_failure(2, 1)}, at(10ms));
  CHECK(find_all<SendAssignments>(step(state, FailureReport{1, worker_failure(0, 143)}, at(11ms))).empty());
  CHECK(find_all<SendAssignments>(step(state, NodeStopped{1}, at(12ms))).empty());
  auto send = find_one<SendAssignments>(step(state, NodeStopped{2}, at(13ms)));
  CHECK(send.round.restart_count == 1);
  CHECK(send.slots[0].conn == 1);  // same node ranks as the first round
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("node 0's fresh port offer in its stopped message is the next round's MASTER_PORT; none keeps it") {
  auto state = running(2, 2);
  step(state, FailureReport{2, worker_failure(2, 1)}, at(10ms));
  step(state, NodeStopped{2, 41001}, at(11ms));  // node 1's offer: not node 0's, never used
  auto send = find_one<SendAssignments>(step(state, NodeStopped{1, 40123}, at(12ms)));
  CHECK(send.round.master_port == 40123);
  step(state, FailureReport{2, worker_failure(2, 1)}, at(20ms));
  step(state, NodeStopped{1}, at(21ms));  // a fixed --master-port: no offer
  CHECK(find_one<SendAssignments>(step(state, NodeStopped{2}, at(22ms))).round.master_port == 40123);
}

TEST_CASE("a failure when the restarts are used up stops the job") {
  auto state = running(1, 1);
  step(state, FailureReport{1, worker_failure(0, 1)}, at(10ms));
  step(state, NodeStopped{1}, at(11ms));
  auto stop = find_one<Broadcast>(step(state, FailureReport{1, worker_failure(0, 4)}, at(20ms)));
  CHECK_FALSE(std::get<StopMsg>(stop.message).restarting);
  CHECK(std::get<StopMsg>(stop.message).root_cause.exit_code == std::optional<int>(4));
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("a node lost during a restart round stops the job") {
  auto state = running(2, 3);
  step(state, FailureReport{2, worker_failure(2, 1)}, at(10ms));
  auto stop = find_one<Broadcast>(step(state, Disconnected{2, ""}, at(11ms)));
  CHECK_FALSE(std::get<StopMsg>(stop.message).restarting);
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("a node stopped by a signal during a restart round stops the job with it as root cause") {
  auto state = running(2, 3);
  step(state, FailureReport{2, worker_failure(2, 1)}, at(10ms));
  Failure signalled;
  signalled.kind = FailureKind::kAgentStopped;
  signalled.pid = 77;
  signalled.signal = 15;  // no rank: the node's ddprun itself
  auto stop = find_one<Broadcast>(step(state, FailureReport{1, signalled}, at(11ms)));
  CHECK_FALSE(std::get<StopMsg>(stop.message).restarting);
  CHECK(std::get<StopMsg>(stop.message).root_cause.signal == std::optional<int>(15));
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("the next deadline is the earliest of join timeout, last call and heartbeats") {
  RendezvousState state(job(2, false), at(0ms).steady);
  CHECK(next_deadline(state) == at(60'000ms).steady);
  step(state, hello(Joiner{}), at(1'000ms));
  CHECK(next_deadline(state) == at(6'000ms).steady);
}

TEST_CASE("a failure report whose ranks do not fit its node is a lost node, not a misreported root cause") {
  auto state = running(2);  // nproc 2 each: node 1 holds ranks 2 and 3
  auto actions = step(state, FailureReport{2, worker_failure(0, 3)}, at(1ms));  // rank 0 is node 0's
  const Failure cause = std::get<StopMsg>(find_one<Broadcast>(actions).message).root_cause;
  CHECK(cause.is_node_failure());
  CHECK(cause.node_rank == 1);
  CHECK(cause.message == "its agent sent an invalid failure report (rank 0 is not rank offset 2 + local rank 0)");
  CHECK(closes(actions, 2));
  auto other = running(2);
  Failure f = worker_failure(3, 3);
  f.local_rank = 5;
  auto lost = step(other, FailureReport{2, f}, at(1ms));
  CHECK(std::get<StopMsg>(find_one<Broadcast>(lost).message).root_cause.message ==
        "its agent sent an invalid failure report (local rank 5 but the node runs 2 workers)");
}
