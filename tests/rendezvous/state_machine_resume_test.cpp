// A restarted server takes back the round its agents still run (state_machine_resume.cpp), one case per rule.
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {

// The hello of the agent on conn that runs node `node_rank` of a round with these worker counts.
Hello resume(ConnId conn, int node_rank, const std::vector<int>& nprocs, int round, bool static_ranks,
             const std::string& master = "10.0.0.1") {
  Joiner j;
  j.conn = conn;
  if (static_ranks) j.node_rank = node_rank;
  j.nproc = nprocs.at(static_cast<std::size_t>(node_rank));
  j.host = "host" + std::to_string(node_rank);
  Hello h = hello(j);
  Assignment a;
  a.node_rank = node_rank;
  a.nnodes = static_cast<int>(nprocs.size());
  a.nprocs = nprocs;
  for (int r = 0; r < node_rank; ++r) a.rank_offset += nprocs[static_cast<std::size_t>(r)];
  for (int n : nprocs) a.world_size += n;
  a.master_addr = master;
  a.master_port = 29500;
  a.restart_count = round;
  h.hello.resume = resume_claim_of(a);
  return h;
}

Failure worker_failure(int rank, int local_rank) {
  Failure f;
  f.rank = rank;
  f.local_rank = local_rank;
  f.pid = 77;
  f.exit_code = 3;
  f.time_unix_ms = 5;
  return f;
}

}  // namespace

TEST_CASE("a restarted server takes the round back once every node of it resumed, assigning nothing") {
  JobConfig config = job(2, true);
  config.max_restarts = 3;
  RendezvousState state(config, at(0ms).steady);
  auto first = step(state, resume(1, 1, {2, 3}, 2, true), at(10ms));
  CHECK(refusal(first, 1).empty());
  CHECK(state.phase == Phase::kJoining);
  CHECK(state.adopting);
  auto second = step(state, resume(2, 0, {2, 3}, 2, true), at(20ms));
  CHECK(state.phase == Phase::kRunning);
  CHECK_FALSE(state.adopting);
  CHECK(find_all<SendAssignments>(second).empty());  // they run it already
  CHECK(state.restart_count == 2);
  CHECK(state.failure_restarts == 2);  // a job of fixed size: every round after the first was a failure restart
  CHECK(state.round_size == 2);
  CHECK(state.by_rank == std::vector<ConnId>{2, 1});
  CHECK(state.round_started == at(20ms).steady);
  // It goes on as if this server had assigned it: a failure restarts it (restart 3 of 3), ranks checked.
  auto restart = find_one<Broadcast>(step(state, FailureReport{1, worker_failure(4, 2)}, at(30ms)));
  CHECK(std::get<StopMsg>(restart.message).restarting);
  CHECK(state.failure_restarts == 3);
  step(state, NodeStopped{1, 0}, at(40ms));
  auto next = find_one<SendAssignments>(step(state, NodeStopped{2, 0}, at(40ms)));
  CHECK(next.round.restart_count == 3);
}

TEST_CASE("a claim whose seat secret is not behind its hello's seat commitment is refused") {
  RendezvousState state(job(2, true), at(0ms).steady);
  Hello h = resume(1, 0, {2, 3}, 0, true);
  h.hello.seat = seat_commitment(std::string(64, '1'));
  h.hello.resume->seat_secret = std::string(64, '2');
  CHECK(refusal(step(state, h, at(10ms)), 1).find("its seat secret is not the one behind its seat commitment") !=
        std::string::npos);
  CHECK_FALSE(state.adopting);
  h.hello.resume->seat_secret = std::string(64, '1');
  CHECK(refusal(step(state, h, at(20ms)), 1).empty());
  CHECK(state.nodes.at(1).seat_commit == h.hello.seat);  // bound from now on
}

TEST_CASE("a server that remembers its round takes it back only from the agents that held its places") {
  // Issue 33: an insider that claimed node 0's place first was given it, and node 0 was refused as a duplicate.
  const std::string secret0(64, 'a'), secret1(64, 'b'), insider(64, 'f');
  auto claim = [&](ConnId conn, int node_rank, const std::string& secret, int round = 0) {
    Hello h = resume(conn, node_rank, {2, 3}, round, true);
    h.hello.seat = seat_commitment(secret);
    h.hello.resume->seat_secret = secret;
    return h;
  };
  JobConfig config = job(2, true);
  config.resumable = true;
  RememberedRound known;
  known.round = *claim(1, 0, secret0).hello.resume;
  known.seats = {seat_commitment(secret0), seat_commitment(secret1)};
  config.remembered = known;
  RendezvousState state(config, at(0ms).steady);
  // The insider first, with the round right and a seat of its own; then with a round of its making.
  CHECK(refusal(step(state, claim(9, 0, insider), at(10ms)), 9).find("node rank 0 of round 0 (2 nodes, world size 5, "
                                                                     "master 10.0.0.1:29500) is another agent's") == 0);
  CHECK(refusal(step(state, claim(8, 0, insider, 5), at(10ms)), 8).find("cannot take back round 5 (2 nodes, world "
                                                                        "size 5, master 10.0.0.1:29500): before its "
                                                                        "restart this server ran round 0") == 0);
  CHECK_FALSE(state.adopting);
  CHECK(state.nodes.empty());
  // The agents that held the places: the round runs again, and is remembered again.
  CHECK(refusal(step(state, claim(1, 0, secret0), at(20ms)), 1).empty());
  auto back = step(state, claim(2, 1, secret1), at(30ms));
  CHECK(state.phase == Phase::kRunning);
  CHECK(state.by_rank == std::vector<ConnId>{1, 2});
  const auto remembered = find_one<RememberRound>(back);
  CHECK(remembered.round.seats == known.seats);
  CHECK(same_round(remembered.round.round, known.round));
}

TEST_CASE("a resumable server remembers each round it starts, with every node's seat; a hosted one does not") {
  for (bool resumable : {true, false}) {
    CAPTURE(resumable);
    JobConfig config = job(2, true);
    config.resumable = resumable;
    RendezvousState state(config, at(0ms).steady);
    std::vector<Action> last;
    for (int i = 0; i < 2; ++i) {
      Joiner j;
      j.conn = static_cast<ConnId>(i + 1);
      j.node_rank = i;
      j.host = "host" + std::to_string(i);
      if (i == 0) j.seat_secret = std::string(64, 'a');  // node 1 is an agent older than seats
      last = step(state, hello(j), at(0ms));
    }
    const auto remembered = find_all<RememberRound>(last);
    if (!resumable) {
      CHECK(remembered.empty());
      continue;
    }
    REQUIRE(remembered.size() == 1);
    const RememberedRound& r = remembered[0].round;
    const auto sent = find_one<SendAssignments>(last);
    CHECK(r.round.restart_count == 0);
    CHECK(r.round.nnodes == 2);
    CHECK(r.round.world_size == 4);
    CHECK(r.round.master_addr == sent.round.master_addr);
    CHECK(r.round.master_port == sent.round.master_port);
    CHECK(r.round.fingerprint == nprocs_fingerprint({2, 2}));
    CHECK(r.seats == std::vector<std::string>{seat_commitment(std::string(64, 'a')), ""});
    CHECK(r.hosts == std::vector<std::string>{"host0", "host1"});
  }
}

TEST_CASE("a resumed round completes when every node reports done, dynamic ranks in any order") {
  RendezvousState state(job(3, false), at(0ms).steady);
  for (int rank : {2, 0, 1}) step(state, resume(static_cast<ConnId>(rank + 1), rank, {1, 1, 1}, 0, false), at(5ms));
  REQUIRE(state.phase == Phase::kRunning);
  CHECK(state.nodes.at(3).node_rank == 2);
  step(state, NodeDone{1}, at(6ms));
  step(state, NodeDone{2}, at(6ms));
  auto done = find_one<Broadcast>(step(state, NodeDone{3}, at(6ms)));
  CHECK(std::holds_alternative<CompleteMsg>(done.message));
  CHECK(state.phase == Phase::kComplete);
}

TEST_CASE("reports sent while the round is taken back are replayed once it runs") {
  RendezvousState state(job(2, true), at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 0, true), at(10ms));
  CHECK(step(state, FailureReport{1, worker_failure(1, 1)}, at(11ms)).empty());  // held, not a pre-start failure
  CHECK(state.phase == Phase::kJoining);
  auto actions = step(state, resume(2, 1, {2, 2}, 0, true), at(12ms));
  auto stop = find_one<Broadcast>(actions);
  CHECK(stop.conns == std::vector<ConnId>{1, 2});
  CHECK(std::get<StopMsg>(stop.message).root_cause.rank == 1);
  CHECK(std::get<StopMsg>(stop.message).reason == "a worker failed");
  CHECK(state.phase == Phase::kStopped);
}

// Issue 32: the server was killed during a hang verdict and restarted; nobody asked again, and the node that
// noticed decided alone 25 s later. Its agent re-sends its view on resume; the view waits for the whole round.
TEST_CASE("a hang view sent while the round is taken back opens the inquiry once it runs") {
  RendezvousState state(job(2, true), at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 0, true), at(10ms));
  RankBeat r;
  r.rank = 1;
  r.local_rank = 1;
  r.pid = 77;
  r.step = 4;
  r.silent_ms = 30'000;
  r.hung = true;
  HangViewMsg view;
  view.suspect = true;
  view.ranks = {r};
  CHECK(step(state, HangReport{1, view}, at(11ms)).empty());  // held: no round to judge yet
  CHECK_FALSE(state.hang.has_value());
  auto actions = step(state, resume(2, 1, {2, 2}, 0, true), at(12ms));
  REQUIRE(state.hang.has_value());  // the inquiry is open again: the other node is asked for its view
  const auto ask = find_all<Broadcast>(actions);
  REQUIRE(ask.size() == 1);
  CHECK(std::holds_alternative<CaptureMsg>(ask[0].message));
  CHECK(ask[0].conns == std::vector<ConnId>{2});
}

TEST_CASE("a claim of another round is refused, naming both; the adoption goes on") {
  RendezvousState state(job(2, true), at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 1, true), at(10ms));
  auto other_round = step(state, resume(2, 1, {2, 2}, 2, true), at(11ms));
  CHECK(refusal(other_round, 2).find("conflicting report: this node runs round 2 (2 nodes, world size 4") == 0);
  CHECK(refusal(other_round, 2).find("the nodes already back run round 1") != std::string::npos);
  CHECK(closes(other_round, 2));
  auto other_master = step(state, resume(3, 1, {2, 2}, 1, true, "10.0.0.7"), at(12ms));
  CHECK(refusal(other_master, 3).find("conflicting report") == 0);
  auto other_world = step(state, resume(4, 1, {2, 3}, 1, true), at(13ms));
  CHECK(refusal(other_world, 4).find("conflicting report") == 0);
  CHECK(state.adopting);
  step(state, resume(5, 1, {2, 2}, 1, true), at(14ms));
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("a node rank that resumed already is a duplicate; plain hellos wait for the round") {
  RendezvousState state(job(2, false), at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 0, false), at(10ms));
  auto twice = step(state, resume(2, 0, {2, 2}, 0, false), at(11ms));
  CHECK(refusal(twice, 2).find("duplicate: node rank 0 of round 0 is back already (host \"host0\"") == 0);
  Joiner plain;
  plain.conn = 3;
  CHECK(refusal(step(state, hello(plain), at(12ms)), 3).find("the rendezvous server restarted and is taking back "
                                                             "round 0") == 0);
  CHECK(state.nodes.size() == 1);
}

TEST_CASE("a claim that does not fit the server's job is refused") {
  RendezvousState state(job(3, false), at(0ms).steady);
  auto two = step(state, resume(1, 0, {2, 2}, 0, false), at(10ms));
  CHECK(refusal(two, 1) == "cannot take back round 0 (2 nodes, world size 4, master 10.0.0.1:29500): it ran with "
                           "2 nodes, and this server runs --nnodes 3");
  Hello wrong_token = resume(2, 0, {2, 2, 2}, 0, false);
  wrong_token.hello.mac = compute_mac("other", wrong_token.nonce, "run1");
  CHECK(refusal(step(state, wrong_token, at(11ms)), 2).find("authentication failed") == 0);
  CHECK_FALSE(state.adopting);
}

TEST_CASE("a fresh server that gathers a new round does not take back an old one") {
  RendezvousState state(job(2, false), at(0ms).steady);
  Joiner plain;
  step(state, hello(plain), at(1ms));
  auto late = step(state, resume(2, 0, {2, 2}, 0, false), at(2ms));
  CHECK(refusal(late, 2).find("this rendezvous server is gathering a new round (1 node joined)") == 0);
}

TEST_CASE("worker counts that do not add up to the claims stop the job") {
  RendezvousState state(job(2, false), at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 0, false), at(10ms));
  Hello liar = resume(2, 1, {2, 2}, 0, false);
  liar.hello.nproc = 1;  // fits its claim, but not the round's fingerprint
  auto stop = find_one<Broadcast>(step(state, liar, at(11ms)));
  CHECK(std::get<StopMsg>(stop.message).root_cause.message.find("do not add up") != std::string::npos);
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("a node not back by the deadline is lost: a job of fixed size stops") {
  RendezvousState state(job(2, true), at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 0, true), at(1'000ms));
  CHECK(next_deadline(state) == at(6'000ms).steady);
  CHECK(find_all<Broadcast>(step(state, Tick{}, at(5'999ms))).empty());
  auto stop = find_one<Broadcast>(step(state, Tick{}, at(6'000ms)));
  const auto& order = std::get<StopMsg>(stop.message);
  CHECK(stop.conns == std::vector<ConnId>{1});
  CHECK(order.root_cause.node_rank == 1);
  CHECK(order.root_cause.message == "it did not come back to the restarted rendezvous server within 5.0 s");
  CHECK(order.root_cause.host.empty());  // nothing remembered: the claims cannot name it
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("a node not back by the deadline is named by the host the remembered round holds for it") {
  JobConfig config = job(2, true);
  config.resumable = true;
  RememberedRound known;
  known.round = *resume(1, 0, {2, 2}, 0, true).hello.resume;
  known.seats = {"", ""};
  known.hosts = {"n1", "n2"};
  config.remembered = known;
  RendezvousState state(config, at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 0, true), at(1'000ms));
  auto stop = find_one<Broadcast>(step(state, Tick{}, at(6'000ms)));
  const auto& order = std::get<StopMsg>(stop.message);
  CHECK(order.root_cause.node_rank == 1);
  CHECK(order.root_cause.host == "n2");
}

TEST_CASE("an elastic job with MIN nodes back by the deadline re-forms without the others") {
  JobConfig config = job(3, false);
  config.min_nodes = 2;
  RendezvousState state(config, at(0ms).steady);
  step(state, resume(1, 0, {2, 2, 2}, 4, false), at(0ms));
  step(state, resume(3, 2, {2, 2, 2}, 4, false), at(0ms));
  step(state, Heartbeat{1}, at(4'000ms));
  step(state, Heartbeat{3}, at(4'000ms));
  auto reform = find_one<Broadcast>(step(state, Tick{}, at(5'000ms)));
  CHECK(std::get<StopMsg>(reform.message).restarting);
  CHECK(reform.conns == std::vector<ConnId>{1, 3});
  CHECK(state.phase == Phase::kRestarting);
  step(state, NodeStopped{1, 0}, at(5'100ms));
  auto next = find_one<SendAssignments>(step(state, NodeStopped{3, 0}, at(5'100ms)));
  CHECK(next.round.restart_count == 5);
  CHECK(next.round.master_addr == "10.0.0.9");  // node 0's address as the server saw it, as after a join
  CHECK(next.round.world_size == 4);
  CHECK(state.nodes.at(3).node_rank == 1);  // ranks contiguous again
}

// Issue 53: the host of an elastic job of real DDP workers lost: the survivors' gloo ranks failed at once, their
// failures reached the new host while it took the round back, and were replayed before the loss: exit 1 naming a
// victim with --max-restarts 0, a restart spent with 3. The loss is the cause: the job re-forms, no restart used.
TEST_CASE("failures held while an elastic round is taken back are victims of the lost node and not the cause") {
  JobConfig config = job(3, false);
  config.min_nodes = 2;
  config.max_restarts = 0;
  RendezvousState state(config, at(0ms).steady);
  step(state, resume(1, 1, {1, 1, 1}, 0, false), at(0ms));
  CHECK(step(state, FailureReport{1, worker_failure(1, 0)}, at(10ms)).empty());  // held
  step(state, resume(3, 2, {1, 1, 1}, 0, false), at(20ms));
  CHECK(step(state, FailureReport{3, worker_failure(2, 0)}, at(30ms)).empty());  // held
  step(state, Heartbeat{1}, at(4'000ms));
  step(state, Heartbeat{3}, at(4'000ms));
  auto actions = step(state, Tick{}, at(5'000ms));
  auto reform = find_one<Broadcast>(actions);
  const auto& stop = std::get<StopMsg>(reform.message);
  CHECK(stop.restarting);
  CHECK(stop.root_cause.kind == FailureKind::kNodeLost);
  CHECK(stop.root_cause.node_rank == 0);
  CHECK(state.phase == Phase::kRestarting);
  CHECK(state.failure_restarts == 0);  // no restart spent
  int victims = 0;
  for (const Action& a : actions)
    if (const Log* log = std::get_if<Log>(&a); log && log->text.find("a victim of that loss") != std::string::npos)
      ++victims;
  CHECK(victims == 2);
}

TEST_CASE("a resume hello to a server whose round runs is a duplicate or a node dropped from it") {
  auto state = running(2);  // static, round 0, conns 1 and 2
  auto dup = step(state, resume(9, 1, {2, 2}, 0, true), at(10ms));
  CHECK(refusal(dup, 9).find("duplicate: node rank 1 of round 0 is connected already") == 0);
  auto old = step(state, resume(10, 1, {2, 2}, 3, true), at(10ms));
  CHECK(refusal(old, 10).find("this node was dropped from round 3") == 0);
  CHECK(refusal(old, 10).find("a job of fixed size does not take a node back") != std::string::npos);
  CHECK(state.phase == Phase::kRunning);
  CHECK(state.nodes.size() == 2);
}

TEST_CASE("an elastic job tells a node that comes back to a round it went on without to join again") {
  JobConfig config = job(3, false);
  config.min_nodes = 1;
  RendezvousState state(config, at(0ms).steady);
  join_all(state, 3, at(0ms));
  REQUIRE(state.phase == Phase::kRunning);
  // Node 1 (conn 2) goes silent (a partition): dropped after the 5 s timeout, the others re-form (round 1).
  step(state, Heartbeat{1}, at(4'000ms));
  step(state, Heartbeat{3}, at(4'000ms));
  step(state, Tick{}, at(5'000ms));
  step(state, NodeStopped{1, 0}, at(5'100ms));
  step(state, NodeStopped{3, 0}, at(5'100ms));
  // Issue 53, invariant 1: its agent stops its workers only once it has heard nothing for the timeout; round 1 starts
  // no earlier than its last word (0 s) + the timeout (5 s) + 2 intervals and the kill's 1 s (8 s).
  REQUIRE(state.phase == Phase::kRestarting);
  REQUIRE(next_deadline(state) == at(8'000ms).steady);
  step(state, Heartbeat{1}, at(7'000ms));
  step(state, Heartbeat{3}, at(7'000ms));
  step(state, Tick{}, at(7'999ms));
  REQUIRE(state.phase == Phase::kRestarting);
  step(state, Tick{}, at(8'000ms));
  REQUIRE(state.phase == Phase::kRunning);
  REQUIRE(state.restart_count == 1);
  // Its agent reconnects, claiming its place in round 0.
  auto old = step(state, resume(10, 1, {2, 2, 2}, 0, false), at(6'000ms));
  CHECK(refusal(old, 10).empty());
  CHECK(final_stop_to(old, 10).find("this node was dropped from round 0") == 0);
  CHECK(stop_invites_rejoin(old, 10));
  CHECK(closes(old, 10));
  CHECK(state.nodes.size() == 2);  // not taken in: it comes back with a plain hello once its workers are gone
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("nodes back between rounds (their server lost during a re-form) make the next round, numbered on") {
  JobConfig config = job(2, true);
  config.max_restarts = 3;
  RendezvousState state(config, at(0ms).steady);
  Joiner j;
  j.conn = 1;
  j.node_rank = 0;
  Hello first = hello(j);
  first.hello.after_round = 1;
  auto said = step(state, first, at(0ms));
  CHECK(state.restart_count == 2);
  bool logged = false;
  for (const auto& log : find_all<Log>(said)) logged |= log.text.find("came back after round 1") != std::string::npos;
  CHECK(logged);
  j.conn = 2;
  j.node_rank = 1;
  j.host = "host1";
  Hello second = hello(j);
  second.hello.after_round = 0;  // an older number never lowers it
  auto start = find_one<SendAssignments>(step(state, second, at(10ms)));
  CHECK(start.round.restart_count == 2);
  CHECK(state.failure_restarts == 2);  // the rounds before count as restarts used, as when a round is taken back
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("a node lost while the round is taken back frees its place for its own return") {
  RendezvousState state(job(2, false), at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 0, false), at(0ms));
  step(state, resume(2, 1, {2, 2}, 0, false), at(0ms));
  REQUIRE(state.phase == Phase::kRunning);
  RendezvousState again(job(2, false), at(0ms).steady);
  step(again, resume(1, 0, {2, 2}, 0, false), at(0ms));
  step(again, Disconnected{1, "reset"}, at(1ms));
  CHECK_FALSE(again.adopting);  // nobody left: the next claim opens it afresh
  step(again, resume(3, 0, {2, 2}, 0, false), at(2ms));
  step(again, resume(4, 1, {2, 2}, 0, false), at(3ms));
  CHECK(again.phase == Phase::kRunning);
}

TEST_CASE("an elastic job taken back admits a late joiner as if this server had formed it") {
  JobConfig config = job(3, false);
  config.min_nodes = 1;
  RendezvousState state(config, at(0ms).steady);
  step(state, resume(1, 0, {2, 2}, 1, false), at(0ms));
  step(state, resume(2, 1, {2, 2}, 1, false), at(0ms));
  REQUIRE(state.phase == Phase::kRunning);
  Joiner late;
  late.conn = 3;
  late.host = "host9";
  auto reform = find_one<Broadcast>(step(state, hello(late), at(100ms)));
  CHECK(std::get<StopMsg>(reform.message).membership);
  CHECK(reform.conns == std::vector<ConnId>{1, 2});
  step(state, NodeStopped{1, 0}, at(200ms));
  auto next = find_one<SendAssignments>(step(state, NodeStopped{2, 0}, at(200ms)));
  CHECK(next.round.restart_count == 2);
  CHECK(next.round.nnodes == 3);
  CHECK(state.nodes.at(3).node_rank == 2);
}
