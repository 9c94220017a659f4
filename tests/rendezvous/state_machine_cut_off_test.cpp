// A standalone server cut off from every node (state_machine_cut_off.cpp): it suspects its own link instead of
// judging the nodes, takes them back on their old connections or on resume hellos, and judges as ever once its
// grace is over or when only some nodes are silent. Heartbeat interval 1 s, timeout 5 s (the fixture's job()).
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {

RendezvousState standalone(int nnodes, std::chrono::milliseconds grace = 30s) {
  JobConfig config = job(nnodes, true);
  config.resumable = true;
  config.reconnect_grace = grace;
  RendezvousState state(config, at(0ms).steady);
  join_all(state, nnodes, at(0ms));
  REQUIRE(state.phase == Phase::kRunning);
  return state;
}

// The hello of node `node_rank`'s agent reconnecting on `conn` to round 0 of a static job of 2 workers per node.
Hello reconnect(ConnId conn, int node_rank, int nnodes) {
  Joiner j;
  j.conn = conn;
  j.node_rank = node_rank;
  j.host = "host" + std::to_string(node_rank);
  Hello h = hello(j);
  Assignment a;
  a.node_rank = node_rank;
  a.nnodes = nnodes;
  a.nprocs.assign(static_cast<std::size_t>(nnodes), 2);
  a.rank_offset = 2 * node_rank;
  a.world_size = 2 * nnodes;
  a.master_addr = "10.0.0.9";
  a.master_port = 29500;
  h.hello.resume = resume_claim_of(a);
  return h;
}

bool stopped(const std::vector<Action>& actions) {
  for (const auto& b : find_all<Broadcast>(actions))
    if (std::holds_alternative<StopMsg>(b.message)) return true;
  return false;
}

// Node 0 (conn 1) reports its local rank 1, global rank 1, exited 3: the job stops with it as the root cause.
FailureReport rank_1_failed() {
  Failure f;
  f.rank = 1;
  f.local_rank = 1;
  f.pid = 5;
  f.exit_code = 3;
  f.time_unix_ms = 1;
  return FailureReport{1, f};
}

// The hello of an agent that stopped its workers for its server's silence (the fence) and joins again on `conn`,
// saying it ran round 0 as static node `node_rank`.
Hello fenced_hello(ConnId conn, int node_rank) {
  Joiner j;
  j.conn = conn;
  j.node_rank = node_rank;
  Hello h = hello(j);
  h.hello.after_round = 0;
  return h;
}

std::string logged(const std::vector<Action>& actions) {
  std::string text;
  for (const auto& log : find_all<Log>(actions)) text += log.text + "\n";
  return text;
}

}  // namespace

TEST_CASE("every node silent at once: the server suspects its own link and keeps the round for its grace") {
  auto state = standalone(3);
  // The link goes down at 1 s: the last beats are 0.6-1.0 s; the first deadline passes at 5.6 s.
  step(state, Heartbeat{1}, at(600ms));
  step(state, Heartbeat{2}, at(800ms));
  step(state, Heartbeat{3}, at(1'000ms));
  auto first = step(state, Tick{}, at(5'600ms));
  CHECK_FALSE(stopped(first));
  CHECK(logged(first).find("heard from none of the 3 nodes for 5.0 s: this server is more likely cut off") !=
        std::string::npos);
  CHECK(state.cut_off_since == at(5'600ms).steady);
  for (auto t : {6'000ms, 10'000ms, 20'000ms, 35'500ms}) CHECK_FALSE(stopped(step(state, Tick{}, at(t))));
  CHECK(state.phase == Phase::kRunning);
  // Past the grace (30 s from 5.6 s) nobody came back: judged, the longest silent node the root cause.
  auto judged = step(state, Tick{}, at(35'700ms));
  REQUIRE(stopped(judged));
  REQUIRE(state.root_cause);
  CHECK(state.root_cause->node_rank == 0);
  CHECK(state.root_cause->message ==
        "missed heartbeats for 35.1 s (the timeout, 5.0 s, and 30.0 s more in case the rendezvous server's own link "
        "was cut)");
}

TEST_CASE("the link heals within the grace: nodes heard again on their old connections, nothing judged") {
  auto state = standalone(2);
  step(state, Heartbeat{1}, at(1'000ms));
  step(state, Heartbeat{2}, at(1'000ms));
  REQUIRE_FALSE(stopped(step(state, Tick{}, at(6'000ms))));
  REQUIRE(state.cut_off_since);
  step(state, Heartbeat{2}, at(20'000ms));  // TCP outlived the cut: the old connection speaks again
  auto back = step(state, Tick{}, at(20'100ms));
  CHECK_FALSE(state.cut_off_since);
  CHECK(logged(back).find("node 1 (host \"host1\") is heard again") != std::string::npos);
  step(state, Heartbeat{1}, at(21'000ms));
  step(state, NodeDone{1}, at(22'000ms));
  auto done = step(state, NodeDone{2}, at(22'000ms));
  CHECK(state.phase == Phase::kComplete);
  CHECK_FALSE(stopped(done));
}

TEST_CASE("after the heal, a node still silent has one heartbeat timeout to come back, then is judged") {
  auto state = standalone(2);
  step(state, Heartbeat{1}, at(1'000ms));
  step(state, Heartbeat{2}, at(1'000ms));
  step(state, Tick{}, at(6'000ms));
  step(state, Heartbeat{2}, at(10'000ms));
  step(state, Tick{}, at(10'000ms));
  REQUIRE_FALSE(state.cut_off_since);
  step(state, Heartbeat{2}, at(14'000ms));
  CHECK_FALSE(stopped(step(state, Tick{}, at(14'900ms))));
  auto judged = step(state, Tick{}, at(15'100ms));  // 10 s + 5 s
  REQUIRE(stopped(judged));
  CHECK(state.root_cause->node_rank == 0);
}

TEST_CASE("an agent that gave its connection up reconnects into its silent place with a resume hello") {
  auto state = standalone(2);
  step(state, Heartbeat{1}, at(1'000ms));
  step(state, Heartbeat{2}, at(1'000ms));
  step(state, Tick{}, at(6'000ms));
  auto again = step(state, reconnect(7, 0, 2), at(25'000ms));
  CHECK(refusal(again, 7).empty());
  CHECK(std::count_if(again.begin(), again.end(), [](const Action& a) {
          auto* c = std::get_if<Close>(&a);
          return c && c->conn == 1;  // the old connection, not the new one
        }) == 1);
  CHECK(state.by_rank[0] == 7);
  CHECK(state.nodes.count(1) == 0);
  CHECK(state.nodes.at(7).rank_offset == 0);
  CHECK(logged(again).find("node 0 (host \"host0\") reconnected to round 0 after 24.0 s of silence") !=
        std::string::npos);
  step(state, reconnect(8, 1, 2), at(25'100ms));
  step(state, Tick{}, at(25'200ms));
  CHECK_FALSE(state.cut_off_since);
  step(state, NodeDone{7}, at(26'000ms));
  step(state, NodeDone{8}, at(26'000ms));
  CHECK(state.phase == Phase::kComplete);
}

TEST_CASE("a live node's place is never taken by a claim, and a wrong claim is a duplicate as before") {
  auto state = standalone(2);
  step(state, Heartbeat{1}, at(4'000ms));
  CHECK(refusal(step(state, reconnect(9, 0, 2), at(4'500ms)), 9).find("duplicate: node rank 0") == 0);
  // Silent, but the claim does not match its place (another host): refused too.
  Hello other = reconnect(10, 1, 2);
  other.hello.host = "intruder";
  other.hello.mac = compute_mac("tok", other.nonce, "run1");
  CHECK(refusal(step(state, other, at(4'500ms)), 10).find("duplicate: node rank 1") == 0);
  CHECK(state.by_rank == std::vector<ConnId>{1, 2});
}

TEST_CASE("a silent place goes back only to the agent that knows the secret behind its seat (issue 33)") {
  JobConfig config = job(2, true);
  config.resumable = true;
  config.reconnect_grace = 30s;
  RendezvousState state(config, at(0ms).steady);
  for (int i = 0; i < 2; ++i) {
    Joiner j;
    j.conn = static_cast<ConnId>(i + 1);
    j.node_rank = i;
    j.host = "host" + std::to_string(i);
    j.seat_secret = std::string(64, static_cast<char>('a' + i));
    step(state, hello(j), at(0ms));
  }
  REQUIRE(state.phase == Phase::kRunning);
  step(state, Heartbeat{1}, at(1'000ms));
  step(state, Heartbeat{2}, at(1'000ms));
  step(state, Tick{}, at(6'000ms));
  // A token holder that names node 0's host, ranks and round, with a seat of its own: refused, the place kept.
  Hello insider = reconnect(9, 0, 2);
  insider.hello.seat = seat_commitment(std::string(64, 'f'));
  insider.hello.resume->seat_secret = std::string(64, 'f');
  CHECK(refusal(step(state, insider, at(20'000ms)), 9).find("duplicate: node rank 0") == 0);
  // Nor does it know node 0's secret from its commitment, or get in with none.
  Hello bare = reconnect(10, 0, 2);
  bare.hello.seat = seat_commitment(std::string(64, 'a'));  // the commitment alone (not sent to other agents)
  CHECK(refusal(step(state, bare, at(20'000ms)), 10).find("duplicate: node rank 0") == 0);
  CHECK(state.by_rank == std::vector<ConnId>{1, 2});
  // Node 0's own agent, with its secret: its place back.
  Hello own = reconnect(7, 0, 2);
  own.hello.seat = seat_commitment(std::string(64, 'a'));
  own.hello.resume->seat_secret = std::string(64, 'a');
  CHECK(refusal(step(state, own, at(25'000ms)), 7).empty());
  CHECK(state.by_rank[0] == 7);
  CHECK(state.nodes.at(7).seat_commit == seat_commitment(std::string(64, 'a')));  // bound still, for a next time
}

TEST_CASE("some nodes silent, others beating: the silent ones are judged at the timeout, as before") {
  auto state = standalone(3);
  step(state, Heartbeat{1}, at(1'000ms));
  for (auto t : {2'000ms, 3'000ms, 4'000ms, 5'000ms, 6'000ms}) {
    step(state, Heartbeat{2}, at(t));
    step(state, Heartbeat{3}, at(t));
  }
  auto judged = step(state, Tick{}, at(6'100ms));
  REQUIRE(stopped(judged));
  CHECK(state.root_cause->node_rank == 0);
  CHECK_FALSE(state.cut_off_since);
}

TEST_CASE("a server an agent hosts, or a grace of 0, judges a silence of every node at the timeout") {
  for (bool resumable : {false, true}) {
    JobConfig config = job(2, true);
    config.resumable = resumable;
    config.reconnect_grace = resumable ? 0ms : 30s;
    RendezvousState state(config, at(0ms).steady);
    join_all(state, 2, at(0ms));
    step(state, Heartbeat{1}, at(1'000ms));
    step(state, Heartbeat{2}, at(1'000ms));
    CHECK(stopped(step(state, Tick{}, at(6'100ms))));
  }
}

TEST_CASE("a node cut off from an agent-hosted server asks after the stop and hears the same root cause") {
  auto state = running(3);  // agent-hosted: not resumable
  for (auto t : {1'000ms, 2'000ms, 3'000ms, 4'000ms, 5'000ms}) {
    step(state, Heartbeat{1}, at(t));
    step(state, Heartbeat{3}, at(t));
  }
  REQUIRE(stopped(step(state, Tick{}, at(5'100ms))));  // node 1 (conn 2) silent since 0 s
  REQUIRE(state.root_cause);
  CHECK(state.root_cause->node_rank == 1);
  CHECK(telling_the_silent(state));  // the hosting agent waits for it
  // The cut heals: node 1's agent, which gave its connection up, asks with its claim.
  auto told = step(state, reconnect(9, 1, 3), at(9'000ms));
  CHECK(refusal(told, 9).empty());
  bool heard = false;
  for (const auto& send : find_all<Send>(told))
    if (auto* stop = std::get_if<StopMsg>(&send.message); stop && send.conn == 9) {
      heard = true;
      CHECK_FALSE(stop->restarting);
      CHECK(stop->root_cause.node_rank == 1);
      CHECK(stop->root_cause.message == state.root_cause->message);
    }
  CHECK(heard);
  CHECK_FALSE(telling_the_silent(state));
  // Asked again (the first answer lost with a link that failed once more): told again, never refused as a stranger
  // (issue 53: a node of the round refused with "closed" named the refusal, not the job's root cause).
  auto again = step(state, reconnect(10, 1, 3), at(9'500ms));
  CHECK(refusal(again, 10).empty());
  bool heard_again = false;
  for (const auto& send : find_all<Send>(again))
    if (auto* stop = std::get_if<StopMsg>(&send.message); stop && send.conn == 10)
      heard_again = stop->root_cause.node_rank == 1;
  CHECK(heard_again);
}

// A server that took the round over (its host lost) judges the nodes that do not come back "did not come back"; one
// that comes back after the stop is told the root cause like any node of the round, not refused.
TEST_CASE("a node of the stopped round that was not judged silent is told the root cause when it asks") {
  auto state = running(3);
  step(state, rank_1_failed(), at(1'000ms));
  REQUIRE(state.phase == Phase::kStopped);
  CHECK_FALSE(telling_the_silent(state));  // nobody is waited for
  auto told = step(state, reconnect(9, 2, 3), at(2'000ms));
  CHECK(refusal(told, 9).empty());
  bool heard = false;
  for (const auto& send : find_all<Send>(told))
    if (auto* stop = std::get_if<StopMsg>(&send.message); stop && send.conn == 9) heard = stop->root_cause.rank == 1;
  CHECK(heard);
}

// Issue 53, the nemesis's seeds 8, 9, 13: a node that stopped its workers for the server's silence (the agent's
// fence) joins again with a hello that says the last round it ran; after the job's end it was refused as a stranger
// ("closed") and named the refusal while the others named the root cause.
TEST_CASE("a fenced node's hello after the end is told how the job ended; a stranger's is still refused") {
  auto state = running(3);
  step(state, rank_1_failed(), at(1'000ms));
  REQUIRE(state.phase == Phase::kStopped);
  auto told = step(state, fenced_hello(9, 2), at(2'000ms));
  CHECK(refusal(told, 9).empty());
  bool heard = false;
  for (const auto& send : find_all<Send>(told))
    if (auto* stop = std::get_if<StopMsg>(&send.message); stop && send.conn == 9) heard = stop->root_cause.rank == 1;
  CHECK(heard);
  Joiner j;
  j.conn = 10;
  j.node_rank = 2;
  CHECK_FALSE(refusal(step(state, hello(j), at(2'100ms)), 10).empty());  // no round named: a stranger to it
  Hello later = hello(j);
  later.hello.after_round = 5;  // a round this job never ran
  CHECK_FALSE(refusal(step(state, later, at(2'200ms)), 10).empty());
  j.conn = 11;
  j.token = "wrong";
  Hello forged = hello(j);
  forged.hello.after_round = 0;
  CHECK(refusal(step(state, forged, at(2'300ms)), 11).find("token") != std::string::npos);
}

TEST_CASE("a fenced node's hello after the job completed hears it was cut off from a completed job") {
  auto state = running(2);
  step(state, NodeDone{1}, at(1'000ms));
  step(state, NodeDone{2}, at(1'000ms));
  REQUIRE(state.phase == Phase::kComplete);
  auto told = step(state, fenced_hello(9, 1), at(2'000ms));
  bool heard = false;
  for (const auto& send : find_all<Send>(told))
    if (auto* e = std::get_if<ErrorMsg>(&send.message); e && send.conn == 9)
      heard = e->kind == ErrorKind::kLostServer && e->message.find("completed without it") != std::string::npos;
  CHECK(heard);
}

TEST_CASE("an agent-hosted server does not wait for a node whose connection closed: it never asks") {
  auto state = running(2);
  REQUIRE(stopped(step(state, Disconnected{2, "connection reset"}, at(1'000ms))));
  CHECK_FALSE(telling_the_silent(state));
}

TEST_CASE("a standalone server tells a node whose reset ended the job, when it comes back asking") {
  // Found on a lossy link (30% each way): node 1's agent heard nothing for its heartbeat timeout, gave the server
  // up (a reset) and reconnected; the server had judged it lost on that reset, stopped the job and exited, and
  // node 1 ended 74 while the others ended 1. Now it is told, as a silent node is.
  auto state = standalone(3);
  REQUIRE(stopped(step(state, Disconnected{2, "connection reset"}, at(1'000ms))));
  CHECK(telling_the_silent(state));
  auto told = step(state, reconnect(9, 1, 3), at(4'000ms));
  bool heard = false;
  for (const auto& send : find_all<Send>(told))
    if (auto* stop = std::get_if<StopMsg>(&send.message); stop && send.conn == 9) heard = true;
  CHECK(heard);
  CHECK_FALSE(telling_the_silent(state));
}

TEST_CASE("a reset read right after this server's own stop keeps the place for the node that gave it up") {
  auto state = running(2);  // agent-hosted: node 0's agent was SIGSTOPped, node 1 gave the server up
  auto reset = step(state, Disconnected{2, "Connection reset by peer", /*after_stall=*/true}, at(6'000ms));
  CHECK_FALSE(stopped(reset));
  CHECK(logged(reset).find("node 1 (host \"host1\") closed while this server was stopped") != std::string::npos);
  auto back = step(state, reconnect(9, 1, 2), at(6'500ms));
  CHECK(refusal(back, 9).empty());
  CHECK(state.by_rank[1] == 9);
  step(state, NodeDone{1}, at(7'000ms));
  step(state, NodeDone{9}, at(7'000ms));
  CHECK(state.phase == Phase::kComplete);
}

TEST_CASE("a node kept after this server's stop that never comes back is lost at its deadline") {
  auto state = running(2);
  step(state, Disconnected{2, "Connection reset by peer", true}, at(6'000ms));
  step(state, Heartbeat{1}, at(9'000ms));
  CHECK_FALSE(stopped(step(state, Tick{}, at(10'900ms))));
  auto judged = step(state, Tick{}, at(11'100ms));  // 6 s + the 5 s timeout
  REQUIRE(stopped(judged));
  CHECK(state.root_cause->node_rank == 1);
}
