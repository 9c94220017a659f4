// Joining rules of the rendezvous state machine, one test case per rule.
#include "common/error.hpp"
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

TEST_CASE("a node with the right token, run id and version joins and waits for the others") {
  RendezvousState state(job(2, false), at(0ms).steady);
  auto actions = step(state, hello(Joiner{}), at(0ms));
  CHECK(find_all<Send>(actions).empty());
  CHECK(find_all<Close>(actions).empty());
  CHECK(state.nodes.size() == 1);
  CHECK(state.phase == Phase::kJoining);
}

TEST_CASE("a hello with another protocol version is refused and its connection closed") {
  RendezvousState state(job(2, false), at(0ms).steady);
  Joiner j;
  j.version = kProtocolVersion + 1;
  auto actions = step(state, hello(j), at(0ms));
  CHECK(refusal(actions, 1).find("protocol version mismatch") != std::string::npos);
  CHECK(closes(actions, 1));
  CHECK(state.nodes.empty());
}

TEST_CASE("a wrong run id and a wrong token get the same refusal: no run-id oracle") {
  // An unauthenticated peer must not learn whether a run id exists: both answers are the same words, and
  // the only difference between the four cases is what the server's own log says.
  auto refusal_for = [](const std::string& run_id, const std::string& token) {
    RendezvousState state(job(2, false), at(0ms).steady);
    Joiner j;
    j.run_id = run_id;
    j.token = token;
    auto actions = step(state, hello(j), at(0ms));
    CHECK(closes(actions, 1));
    CHECK(state.nodes.empty());
    return refusal(actions, 1);
  };
  const std::string wrong_run_id = refusal_for("other", "tok");
  CHECK(wrong_run_id.find("authentication failed") == 0);
  CHECK(wrong_run_id.find("other") == std::string::npos);
  CHECK(refusal_for("run1", "guess") == wrong_run_id);
  CHECK(refusal_for("other", "guess") == wrong_run_id);
  // The MAC is over the run id the server hosts: a MAC made with the right token for another run id fails
  // the same check, so the run id is never compared on its own before the MAC.
  RendezvousState state(job(2, false), at(0ms).steady);
  Hello h = hello(Joiner{});
  h.hello.run_id = "other";  // a right MAC for run1, but the hello claims another run
  CHECK(refusal(step(state, h, at(0ms)), 1) == wrong_run_id);
}

TEST_CASE("a hello with a wrong token is refused, logged, and the joined nodes are undisturbed") {
  RendezvousState state(job(2, false), at(0ms).steady);
  step(state, hello(Joiner{}), at(0ms));
  Joiner intruder;
  intruder.conn = 2;
  intruder.token = "guess";
  auto actions = step(state, hello(intruder), at(1ms));
  CHECK(refusal(actions, 2).find("authentication failed") != std::string::npos);
  CHECK(find_one<Log>(actions).level == ddprun::LogLevel::kWarning);
  CHECK(find_all<Send>(actions).size() == 1);  // nothing for node 1
  CHECK(state.nodes.size() == 1);
  CHECK(state.phase == Phase::kJoining);
}

TEST_CASE("a static node rank out of range is refused naming the allowed range") {
  RendezvousState state(job(4, true), at(0ms).steady);
  Joiner j;
  j.node_rank = 4;
  CHECK(refusal(step(state, hello(j), at(0ms)), 1) ==
        "node rank 4 is out of range: --nnodes 4 allows 0..3");
}

TEST_CASE("a duplicate static node rank is refused naming the node that holds it") {
  RendezvousState state(job(4, true), at(0ms).steady);
  Joiner first;
  first.node_rank = 1;
  first.host = "alpha";
  step(state, hello(first), at(0ms));
  Joiner second = first;
  second.conn = 2;
  second.host = "beta";
  auto why = refusal(step(state, hello(second), at(1ms)), 2);
  CHECK(why.find("duplicate node rank 1") != std::string::npos);
  CHECK(why.find("alpha") != std::string::npos);
  CHECK(state.nodes.size() == 1);
}

TEST_CASE("a static job refuses a node without a node rank") {
  RendezvousState state(job(2, true), at(0ms).steady);
  CHECK(refusal(step(state, hello(Joiner{}), at(0ms)), 1).find("pass --node-rank") != std::string::npos);
}

TEST_CASE("a dynamic job refuses a node that brings a node rank") {
  RendezvousState state(job(2, false), at(0ms).steady);
  Joiner j;
  j.node_rank = 0;
  CHECK(refusal(step(state, hello(j), at(0ms)), 1).find("dynamically") != std::string::npos);
}

TEST_CASE("a node with no workers is refused") {
  RendezvousState state(job(2, false), at(0ms).steady);
  Joiner j;
  j.nproc = 0;
  CHECK(refusal(step(state, hello(j), at(0ms)), 1).find("at least one worker") != std::string::npos);
}

TEST_CASE("a second hello on a joined connection closes it") {
  RendezvousState state(job(2, false), at(0ms).steady);
  step(state, hello(Joiner{}), at(0ms));
  CHECK(closes(step(state, hello(Joiner{}), at(1ms)), 1));
}

TEST_CASE("the rendezvous completes when the last expected node joins") {
  RendezvousState state(job(3, true), at(0ms).steady);
  auto actions = join_all(state, 3, at(0ms));
  auto send = find_one<SendAssignments>(actions);
  CHECK(send.slots.size() == 3);
  CHECK(send.round.nnodes == 3);
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("global ranks are prefix sums of each node's worker count") {
  RendezvousState state(job(3, true), at(0ms).steady);
  std::vector<Action> actions;
  int nprocs[] = {4, 1, 3};
  for (int i : {2, 0, 1}) {  // join order differs from rank order
    Joiner j;
    j.conn = static_cast<ConnId>(10 + i);
    j.node_rank = i;
    j.nproc = nprocs[i];
    actions = step(state, hello(j), at(0ms));
  }
  auto send = find_one<SendAssignments>(actions);
  CHECK(send.round.world_size == 8);
  REQUIRE(send.slots.size() == 3);
  CHECK(send.slots[0].conn == 10);
  CHECK(send.slots[0].rank_offset == 0);
  CHECK(send.slots[1].rank_offset == 4);
  CHECK(send.slots[2].rank_offset == 5);
  CHECK(send.round.nprocs_runs == std::vector<std::pair<int, int>>{{4, 1}, {1, 1}, {3, 1}});
}

TEST_CASE("dynamic node ranks follow host and address order, not join order") {
  RendezvousState state(job(3, false), at(0ms).steady);
  std::vector<Action> actions;
  for (auto [conn, host] : std::vector<std::pair<ConnId, std::string>>{{1, "c"}, {2, "a"}, {3, "b"}}) {
    Joiner j;
    j.conn = conn;
    j.host = host;
    actions = step(state, hello(j), at(0ms));
  }
  auto send = find_one<SendAssignments>(actions);
  CHECK(send.slots[0].conn == 2);
  CHECK(send.slots[1].conn == 3);
  CHECK(send.slots[2].conn == 1);
}

TEST_CASE("node 0's address and picked port become MASTER_ADDR and MASTER_PORT") {
  RendezvousState state(job(2, true), at(0ms).steady);
  Joiner n1;
  n1.conn = 1;
  n1.node_rank = 1;
  n1.master_port = 1111;
  n1.peer = "10.0.0.7";
  step(state, hello(n1), at(0ms));
  Joiner n0;
  n0.conn = 2;
  n0.node_rank = 0;
  n0.master_port = 2222;
  n0.peer = "10.0.0.8";
  auto send = find_one<SendAssignments>(step(state, hello(n0), at(0ms)));
  CHECK(send.round.master_addr == "10.0.0.8");
  CHECK(send.round.master_port == 2222);
}

TEST_CASE("node 0 on the server's machine is named by the address the other nodes reached the server at") {
  RendezvousState state(job(2, true), at(0ms).steady);
  Joiner n0;
  n0.node_rank = 0;
  n0.peer = "127.0.0.1";
  auto h0 = hello(n0);
  h0.local_address = "127.0.0.1";
  step(state, h0, at(0ms));
  Joiner n1;
  n1.conn = 2;
  n1.node_rank = 1;
  auto h1 = hello(n1);
  h1.local_address = "192.168.5.1";
  auto send = find_one<SendAssignments>(step(state, h1, at(0ms)));
  CHECK(send.round.master_addr == "192.168.5.1");
}

// Issue 53: a dual-stack node 0 whose name resolves to its IPv6 address first reaches its own server over IPv6, from
// that very address; the other node, whose IPv6 path is broken, comes over IPv4. The workers must be given the
// address the other node reached, not node 0's IPv6 one (gloo could not connect: exit 1 after the group timeout).
TEST_CASE("a dual-stack node 0 that reached its own server over IPv6 is named by the IPv4 the others reached") {
  for (const bool node0_first : {true, false}) {
    RendezvousState state(job(2, true), at(0ms).steady);
    Joiner n0;
    n0.node_rank = 0;
    n0.peer = "fd00::1";
    auto h0 = hello(n0);
    h0.local_address = "fd00::1";  // from its own address to its own address: the same machine
    Joiner n1;
    n1.conn = 2;
    n1.node_rank = 1;
    n1.peer = "10.0.0.2";
    auto h1 = hello(n1);
    h1.local_address = "10.0.0.1";
    std::vector<Action> last;
    if (node0_first) {
      step(state, h0, at(0ms));
      last = step(state, h1, at(0ms));
    } else {
      step(state, h1, at(0ms));
      last = step(state, h0, at(0ms));
    }
    CHECK(find_one<SendAssignments>(last).round.master_addr == "10.0.0.1");
  }
}

TEST_CASE("an agent's address override wins over the address the server observed") {
  RendezvousState state(job(1, true), at(0ms).steady);
  Joiner n0;
  n0.node_rank = 0;
  n0.peer = "127.0.0.1";
  n0.address = "node0.cluster";
  CHECK(find_one<SendAssignments>(step(state, hello(n0), at(0ms))).round.master_addr == "node0.cluster");
}

TEST_CASE("the rendezvous' log counts one node as '1 node'") {
  RendezvousState state(job(1, true), at(0ms).steady);
  Joiner n0;
  n0.node_rank = 0;
  std::string said;
  for (const auto& log : find_all<Log>(step(state, hello(n0), at(0ms)))) said += log.text + "\n";
  CHECK(said.find("rendezvous complete: run \"run1\", 1 node, world size 2,") != std::string::npos);
}

TEST_CASE("a join after the rendezvous completed is refused") {
  RendezvousState state(job(1, false), at(0ms).steady);
  join_all(state, 1, at(0ms));
  Joiner late;
  late.conn = 9;
  CHECK(refusal(step(state, hello(late), at(1ms)), 9).find("is closed") != std::string::npos);
  CHECK(state.nodes.size() == 1);
}

TEST_CASE("a node that leaves before the rendezvous completes frees its static node rank") {
  RendezvousState state(job(2, true), at(0ms).steady);
  Joiner j;
  j.node_rank = 1;
  step(state, hello(j), at(0ms));
  auto actions = step(state, Disconnected{1, "eof"}, at(1ms));
  CHECK(find_all<Broadcast>(actions).empty());
  CHECK(state.phase == Phase::kJoining);
  j.conn = 2;
  CHECK(refusal(step(state, hello(j), at(2ms)), 2).empty());
}

TEST_CASE("the rendezvous times out naming the missing static node ranks") {
  JobConfig config = job(4, true);
  config.heartbeat_timeout = 120s;  // the joined node stays alive throughout
  RendezvousState state(config, at(0ms).steady);
  Joiner j;
  j.node_rank = 1;
  step(state, hello(j), at(0ms));
  CHECK(find_all<Send>(step(state, Tick{}, at(59'999ms))).empty());
  auto actions = step(state, Tick{}, at(60'000ms));
  auto sends = find_all<Send>(actions);
  REQUIRE(sends.size() == 1);
  auto error = std::get<ErrorMsg>(sends[0].message);
  CHECK(error.kind == ErrorKind::kTimeout);
  CHECK(error.message == "rendezvous timed out after 60.0 s: 1 of 4 nodes joined; missing node ranks 0, 2, 3");
  CHECK(closes(actions, 1));
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("the rendezvous times out naming the dynamic nodes that did join") {
  JobConfig config = job(3, false);
  config.heartbeat_timeout = 120s;
  RendezvousState state(config, at(0ms).steady);
  join_all(state, 2, at(0ms));
  auto sends = find_all<Send>(step(state, Tick{}, at(60'000ms)));
  REQUIRE(sends.size() == 2);
  CHECK(std::get<ErrorMsg>(sends[0].message).message.find("2 of 3 nodes joined (need 3); joined hosts: host0, host1") !=
        std::string::npos);
}

TEST_CASE("an elastic job starts when the last call passes after min nodes joined") {
  JobConfig config = job(4, false);
  config.min_nodes = 2;
  config.heartbeat_timeout = 120s;
  RendezvousState state(config, at(0ms).steady);
  join_all(state, 2, at(1'000ms));
  CHECK(find_all<SendAssignments>(step(state, Tick{}, at(10'999ms))).empty());
  auto send = find_one<SendAssignments>(step(state, Tick{}, at(11'000ms)));
  CHECK(send.round.nnodes == 2);
}

TEST_CASE("an elastic job starts at once when max nodes joined") {
  JobConfig config = job(3, false);
  config.min_nodes = 1;
  RendezvousState state(config, at(0ms).steady);
  CHECK(find_one<SendAssignments>(join_all(state, 3, at(0ms))).round.nnodes == 3);
}

TEST_CASE("a configuration with static ranks and an elastic range is invalid") {
  JobConfig config = job(3, true);
  config.min_nodes = 1;
  CHECK_THROWS_AS(validate(config), RendezvousError);
  CHECK_NOTHROW(validate(job(3, true)));
}

TEST_CASE("a node whose workers would push the world size past int's range is refused") {
  RendezvousState state(job(3, false), at(0ms).steady);
  Joiner big;
  big.nproc = kMaxNproc;
  state.joined_procs = kMaxRank + 1 - kMaxNproc + 1;  // as if 16383 nodes of 65536 workers had joined
  CHECK(refusal(step(state, hello(big), at(0ms)), 1) == "the world size would exceed 1073741824 workers");
  big.nproc = kMaxNproc - 1;
  CHECK(refusal(step(state, hello(big), at(0ms)), 1).empty());
}

TEST_CASE("the rendezvous timeout names a node that joined and then went silent, not only its missing rank") {
  JobConfig config = job(3, true);
  RendezvousState state(config, at(0ms).steady);
  for (int rank : {0, 1}) {
    Joiner j;
    j.conn = static_cast<ConnId>(rank + 1);
    j.node_rank = rank;
    j.host = "host" + std::to_string(rank);
    step(state, hello(j), at(0ms));
  }
  // Node 1 goes silent (a partition), node 0 keeps beating; node 2 never comes.
  for (int s = 1; s <= 59; ++s) step(state, Heartbeat{1}, at(std::chrono::seconds(s)));
  step(state, Tick{}, at(5'100ms));  // node 1 dropped after the 5 s heartbeat timeout
  auto actions = step(state, Tick{}, at(60'000ms));
  auto error = std::get<ErrorMsg>(find_all<Send>(actions).at(0).message);
  CHECK(error.message ==
        "rendezvous timed out after 60.0 s: 1 of 3 nodes joined; missing node ranks 1, 2; node 1 (host \"host1\", "
        "10.0.0.9) joined, then went silent (missed heartbeats for 5.0 s)");
}

TEST_CASE("a node that left and joined again is no longer named as gone") {
  JobConfig config = job(3, true);
  RendezvousState state(config, at(0ms).steady);
  Joiner j;
  j.conn = 1;
  j.node_rank = 1;
  step(state, hello(j), at(0ms));
  step(state, Disconnected{1, "connection reset"}, at(1'000ms));
  j.conn = 2;
  step(state, hello(j), at(2'000ms));
  for (int s = 3; s <= 59; s += 2) step(state, Heartbeat{2}, at(std::chrono::seconds(s)));
  auto error = std::get<ErrorMsg>(find_all<Send>(step(state, Tick{}, at(60'000ms))).at(0).message);
  CHECK(error.message == "rendezvous timed out after 60.0 s: 1 of 3 nodes joined; missing node ranks 0, 2");
}
