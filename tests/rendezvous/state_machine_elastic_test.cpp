// Elastic membership (--nnodes MIN:MAX): re-forming without a lost or stopped node, late joiners, too few
// nodes, and the restart budget. One test case per rule (state_machine.hpp has the lifecycle).
#include "common/error.hpp"
#include "tests/rendezvous/state_machine_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {
// Dynamic ranks, min:max nodes, `running` of them joined (conns 1..running, hosts host0..: ranks in that order).
RendezvousState elastic(int min, int max, int running, int max_restarts) {
  JobConfig config = job(max, false);
  config.min_nodes = min;
  config.max_restarts = max_restarts;
  config.heartbeat_timeout = 600s;  // liveness is not what these tests are about
  RendezvousState state(config, at(0ms).steady);
  join_all(state, running, at(0ms));
  if (state.phase == Phase::kJoining) step(state, Tick{}, at(10'000ms));  // the last call
  REQUIRE(state.phase == Phase::kRunning);
  return state;
}

Hello late_hello(ConnId conn, const std::string& host) {
  Joiner j;
  j.conn = conn;
  j.host = host;
  return hello(j);
}

// Every node of `conns` says its workers are down; returns the last step's actions.
std::vector<Action> all_stopped(RendezvousState& state, std::vector<ConnId> conns, Now now) {
  std::vector<Action> last;
  for (ConnId conn : conns) last = step(state, NodeStopped{conn}, now);
  return last;
}

Failure signalled(int signal) {
  Failure f;
  f.kind = FailureKind::kAgentStopped;  // no rank: the node's ddprun itself
  f.pid = 77;
  f.signal = signal;
  return f;
}

int rank_of(const SendAssignments& send, ConnId conn) {
  for (const Slot& slot : send.slots)
    if (slot.conn == conn) return slot.node_rank;
  return -1;
}
}  // namespace

TEST_CASE("elastic: a node lost while MIN remain re-forms the job with the others, using no restart") {
  auto state = elastic(2, 4, 3, 2);
  auto actions = step(state, Disconnected{2, "end of file"}, at(20'000ms));
  auto stop = find_one<Broadcast>(actions);
  CHECK(stop.conns == std::vector<ConnId>{1, 3});  // not the lost node
  const auto& msg = std::get<StopMsg>(stop.message);
  CHECK(msg.restarting);
  CHECK_FALSE(msg.membership);
  CHECK(describe(msg.root_cause) == "node 1 (host host1) lost: connection closed (end of file)");
  CHECK(msg.reason ==
        "re-forming the job without node 1 (host \"host1\"): 2 nodes left (a node gone while --nnodes MIN remain: no "
        "restart used)");
  CHECK(state.phase == Phase::kRestarting);
  CHECK(state.failure_restarts == 0);  // the budget is for worker failures
  CHECK(state.departures.at("host1") == 1);
}

TEST_CASE("elastic: the re-formed round has contiguous ranks, the new world size and restart count + 1") {
  auto state = elastic(2, 4, 3, 2);
  step(state, Disconnected{1, ""}, at(20'000ms));  // node 0, the master, is lost
  auto send = find_one<SendAssignments>(all_stopped(state, {2, 3}, at(20'010ms)));
  CHECK(send.round.nnodes == 2);
  CHECK(send.round.world_size == 4);
  CHECK(send.round.restart_count == 1);
  CHECK(rank_of(send, 2) == 0);  // the survivors keep their order
  CHECK(rank_of(send, 3) == 1);
  CHECK(send.slots[1].rank_offset == 2);
  CHECK(send.round.master_addr == "10.0.0.9");
  CHECK(state.phase == Phase::kRunning);
  CHECK(state.round_size == 2);
}

TEST_CASE("elastic: a node lost with fewer than min left stops the job, saying so") {
  auto state = elastic(2, 3, 2, 5);
  auto stop = find_one<Broadcast>(step(state, Disconnected{2, ""}, at(20'000ms)));
  const auto& msg = std::get<StopMsg>(stop.message);
  CHECK_FALSE(msg.restarting);
  CHECK(msg.reason == "a node was lost; 1 node left, fewer than the 2 that --nnodes 2:3 needs");
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("elastic: a flaky spare never spends the restart budget, and is refused once it left max_departures times") {
  auto state = elastic(1, 3, 2, 0);  // --max-restarts 0: any charged restart would end the job
  state.config.max_departures = 3;
  ConnId spare = 2;
  for (int i = 0; i < 3; ++i) {
    auto actions = step(state, Disconnected{spare, ""}, at(20'000ms + std::chrono::milliseconds(100 * i)));
    CHECK(std::get<StopMsg>(find_one<Broadcast>(actions).message).restarting);
    find_one<SendAssignments>(all_stopped(state, {1}, at(20'010ms + std::chrono::milliseconds(100 * i))));
    REQUIRE(state.phase == Phase::kRunning);  // the healthy node goes on alone
    spare = static_cast<ConnId>(10 + i);
    auto back = step(state, late_hello(spare, "host1"), at(20'050ms + std::chrono::milliseconds(100 * i)));
    if (i < 2) {
      CHECK(refusal(back, spare).empty());
      find_one<SendAssignments>(all_stopped(state, {1}, at(20'060ms + std::chrono::milliseconds(100 * i))));
    } else {
      CHECK(refusal(back, spare).find("host \"host1\" left this job 3 times") != std::string::npos);
    }
  }
  CHECK(state.failure_restarts == 0);
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("elastic: a node stopped by a signal leaves: it is told so and the job re-forms without it") {
  auto state = elastic(1, 3, 2, 1);
  auto actions = step(state, FailureReport{2, signalled(15)}, at(20'000ms));
  CHECK_FALSE(stop_invites_rejoin(actions, 2));  // it was told to stop: it does not come back by itself
  CHECK_FALSE(final_stop_to(actions, 2).empty());
  CHECK(closes(actions, 2));
  CHECK(find_one<Broadcast>(actions).conns == std::vector<ConnId>{1});
  CHECK(state.phase == Phase::kRestarting);
  auto send = find_one<SendAssignments>(all_stopped(state, {1}, at(20'010ms)));
  CHECK(send.round.nnodes == 1);
}

TEST_CASE("elastic: a node that starts while the job runs is admitted and re-forms the job without a restart") {
  auto state = elastic(2, 4, 2, 0);
  auto actions = step(state, late_hello(7, "host9"), at(20'000ms));
  CHECK(refusal(actions, 7).empty());
  auto stop = find_one<Broadcast>(actions);
  CHECK(stop.conns == std::vector<ConnId>{1, 2});  // the newcomer runs nothing yet
  const auto& msg = std::get<StopMsg>(stop.message);
  CHECK(msg.restarting);
  CHECK(msg.membership);
  CHECK(msg.reason.find("host \"host9\" (10.0.0.9) joined, 3 nodes in the next round") != std::string::npos);
  CHECK(state.failure_restarts == 0);
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 2}, at(20'010ms)));
  CHECK(send.round.nnodes == 3);
  CHECK(send.round.restart_count == 1);
  CHECK(send.round.max_restarts == 0);
  CHECK(rank_of(send, 7) == 2);  // appended after the nodes that stay
}

TEST_CASE("elastic: a node that starts while the job re-forms waits for that round") {
  auto state = elastic(2, 4, 3, 1);
  step(state, Disconnected{3, ""}, at(20'000ms));
  CHECK(find_all<Broadcast>(step(state, late_hello(8, "host8"), at(20'001ms))).empty());
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 2}, at(20'010ms)));
  CHECK(send.round.nnodes == 3);
  CHECK(rank_of(send, 8) == 2);
}

TEST_CASE("elastic: a node that starts once a node reported done waits; it hears that the job completed") {
  auto state = elastic(1, 3, 2, 0);
  step(state, NodeDone{1}, at(20'000ms));
  CHECK(find_all<Broadcast>(step(state, late_hello(9, "host9"), at(20'001ms))).empty());
  step(state, NodeDone{9}, at(20'002ms));  // it runs nothing: its word does not count
  CHECK(state.phase == Phase::kRunning);
  auto done = find_one<Broadcast>(step(state, NodeDone{2}, at(20'003ms)));
  CHECK(std::holds_alternative<CompleteMsg>(done.message));
  CHECK(done.conns == std::vector<ConnId>{1, 2, 9});
}

TEST_CASE("elastic: a node beyond max is refused while the job runs") {
  auto state = elastic(1, 2, 2, 3);
  CHECK(refusal(step(state, late_hello(9, "host9"), at(20'000ms)), 9) ==
        "the job already has 2 nodes, the most --nnodes 1:2 allows");
  CHECK(state.phase == Phase::kRunning);
}

TEST_CASE("a job with a fixed node count still refuses late nodes and stops when one is lost") {
  JobConfig config = job(2, false);
  config.max_restarts = 3;
  RendezvousState state(config, at(0ms).steady);
  join_all(state, 2, at(0ms));
  CHECK(refusal(step(state, late_hello(9, "host9"), at(1ms)), 9).find("is closed (job running)") != std::string::npos);
  auto stop = find_one<Broadcast>(step(state, Disconnected{1, ""}, at(2ms)));
  CHECK(std::get<StopMsg>(stop.message).reason == "a node was lost");
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("elastic: a node lost while the job re-forms is dropped from it without using another restart") {
  auto state = elastic(1, 4, 3, 1);
  step(state, FailureReport{1, [] { Failure f; f.rank = 0; f.local_rank = 0; f.pid = 5; f.exit_code = 1; return f; }()},
       at(20'000ms));
  REQUIRE(state.phase == Phase::kRestarting);
  step(state, NodeStopped{1}, at(20'001ms));
  CHECK(find_all<Broadcast>(step(state, Disconnected{2, ""}, at(20'002ms))).empty());
  auto send = find_one<SendAssignments>(step(state, NodeStopped{3}, at(20'003ms)));
  CHECK(send.round.nnodes == 2);
  CHECK(rank_of(send, 3) == 1);
  CHECK(state.failure_restarts == 1);
}

TEST_CASE("elastic: a waiting node that leaves changes nothing for the running job") {
  auto state = elastic(2, 4, 2, 0);
  step(state, NodeDone{1}, at(20'000ms));  // finishing: the newcomer waits instead of re-forming the job
  step(state, late_hello(9, "host9"), at(20'001ms));
  auto actions = step(state, Disconnected{9, ""}, at(20'002ms));
  CHECK(find_all<Broadcast>(actions).empty());
  CHECK(state.phase == Phase::kRunning);
  CHECK(state.nodes.size() == 2);
}

TEST_CASE("elastic: the budget counts failures only; restart_count counts every round") {
  auto state = elastic(1, 3, 1, 1);
  step(state, late_hello(5, "hostB"), at(20'000ms));  // membership: round 1, no restart used
  all_stopped(state, {1}, at(20'001ms));
  CHECK(state.restart_count == 1);
  CHECK(state.failure_restarts == 0);
  Failure f;
  f.rank = 2;
  f.local_rank = 0;
  f.pid = 9;
  f.exit_code = 3;
  step(state, FailureReport{5, f}, at(20'002ms));  // hostB is node 1 (ranks 2, 3): round 2, restart 1 of 1
  CHECK(state.failure_restarts == 1);
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 5}, at(20'003ms)));
  CHECK(send.round.restart_count == 2);
  f.exit_code = 4;
  auto stop = find_one<Broadcast>(step(state, FailureReport{5, f}, at(20'004ms)));  // no restart left
  CHECK_FALSE(std::get<StopMsg>(stop.message).restarting);
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("elastic: the node that hosts the server, stopped by a signal, ends the job instead of re-forming it") {
  JobConfig config = job(3, false);
  config.min_nodes = 1;
  config.max_restarts = 2;
  RendezvousState state(config, at(0ms).steady);
  Hello host = late_hello(1, "host0");
  host.hello.hosts_server = true;
  step(state, host, at(0ms));
  step(state, late_hello(2, "host1"), at(0ms));
  step(state, late_hello(3, "host2"), at(0ms));
  REQUIRE(state.phase == Phase::kRunning);
  auto stop = find_one<Broadcast>(step(state, FailureReport{1, signalled(2)}, at(1ms)));
  const auto& msg = std::get<StopMsg>(stop.message);
  CHECK_FALSE(msg.restarting);
  CHECK(msg.reason == "a node was stopped; it hosts the rendezvous server, without which the job cannot re-form");
  CHECK(state.phase == Phase::kStopped);
}

TEST_CASE("a node dropped for silence is told why before its connection closes: it may only have been paused") {
  auto state = elastic(1, 3, 2, 1);
  step(state, Heartbeat{1}, at(300'000ms));
  auto actions = step(state, Tick{}, at(600'000ms));  // node 1 (conn 2) silent past the 600 s timeout
  CHECK(final_stop_to(actions, 2) == "this node was dropped (missed heartbeats for 600.0 s); the job re-forms without it");
  CHECK(stop_invites_rejoin(actions, 2));  // issue 19: once its stale workers are gone it comes back as a new node
  CHECK(closes(actions, 2));
  CHECK(find_one<Broadcast>(actions).conns == std::vector<ConnId>{1});
  // Come back it does, with a plain hello from the same host: admitted like any late joiner (one departure of
  // the host counted, under max_departures).
  auto back = step(state, late_hello(9, "host1"), at(600'100ms));
  CHECK(final_stop_to(back, 9).empty());
  CHECK(state.nodes.count(9) == 1);

  RendezvousState joining(job(3, false), at(0ms).steady);
  join_all(joining, 1, at(0ms));
  auto dropped = step(joining, Tick{}, at(5'000ms));
  CHECK(refusal(dropped, 1) == "the rendezvous server dropped this node: missed heartbeats for 5.0 s");
  CHECK(closes(dropped, 1));
}

// ---- join_policy and join_min_interval (JobConfig::join_policy): when a late joiner re-forms the job ----

namespace {
// elastic() with a join policy: the first round starts at 10 s (the last call) unless `running` == max.
RendezvousState elastic_joins(int min, int max, int running, int max_restarts, JoinPolicy policy,
                              std::chrono::milliseconds min_interval = 0ms) {
  auto state = elastic(min, max, running, max_restarts);
  state.config.join_policy = policy;
  state.config.join_min_interval = min_interval;
  return state;
}

bool logs(const std::vector<Action>& actions, const std::string& text) {
  auto all = find_all<Log>(actions);
  return std::any_of(all.begin(), all.end(), [&](const Log& l) { return l.text.find(text) != std::string::npos; });
}

Failure worker_exit(int rank) {
  Failure f;
  f.rank = rank;
  f.local_rank = rank % 2;
  f.pid = 40 + rank;
  f.exit_code = 1;
  return f;
}
}  // namespace

TEST_CASE("join_policy at_failure: a late joiner waits unplaced; the running round goes on, whatever the time") {
  auto state = elastic_joins(2, 4, 2, 1, JoinPolicy::kAtFailure);
  auto actions = step(state, late_hello(7, "host9"), at(20'000ms));
  CHECK(refusal(actions, 7).empty());
  CHECK(find_all<Broadcast>(actions).empty());
  CHECK(find_all<SendAssignments>(actions).empty());
  CHECK(logs(actions, "host \"host9\" (10.0.0.9); it waits for the next round (join_policy at_failure: the job "
                      "re-forms with it after a failure or a departure)"));
  CHECK(state.nodes.at(7).node_rank == -1);
  CHECK(next_deadline(state) == Clock::time_point{} + 600'000ms);  // only the heartbeats' deadline
  step(state, Heartbeat{1}, at(500'000ms));
  step(state, Heartbeat{2}, at(500'000ms));
  step(state, Heartbeat{7}, at(500'000ms));
  CHECK(find_all<Broadcast>(step(state, Tick{}, at(500'001ms))).empty());
  CHECK(state.phase == Phase::kRunning);
  CHECK(state.restart_count == 0);
}

TEST_CASE("join_policy at_failure: a worker failure's restart round places the waiting joiner") {
  auto state = elastic_joins(2, 4, 2, 1, JoinPolicy::kAtFailure);
  step(state, late_hello(7, "host9"), at(20'000ms));
  auto actions = step(state, FailureReport{2, worker_exit(2)}, at(30'000ms));
  auto stop = find_one<Broadcast>(actions);
  CHECK(stop.conns == std::vector<ConnId>{1, 2});  // the joiner runs nothing to stop
  CHECK(std::get<StopMsg>(stop.message).reason == "restarting the job (restart 1 of 1)");
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 2}, at(30'010ms)));
  CHECK(send.round.nnodes == 3);
  CHECK(send.round.world_size == 6);
  CHECK(send.round.restart_count == 1);
  CHECK(rank_of(send, 7) == 2);
  CHECK(state.failure_restarts == 1);
}

TEST_CASE("join_policy at_failure: the re-form after a node lost places the waiting joiner") {
  auto state = elastic_joins(2, 4, 3, 0, JoinPolicy::kAtFailure);
  step(state, late_hello(7, "host9"), at(20'000ms));
  auto stop = find_one<Broadcast>(step(state, Disconnected{3, "end of file"}, at(30'000ms)));
  CHECK(stop.conns == std::vector<ConnId>{1, 2});
  CHECK_FALSE(std::get<StopMsg>(stop.message).membership);
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 2}, at(30'010ms)));
  CHECK(send.round.nnodes == 3);
  CHECK(rank_of(send, 7) == 2);  // in the lost node's place at the end
  CHECK(state.failure_restarts == 0);
}

TEST_CASE("join_policy at_failure: a job that completes first tells the waiting joiner complete") {
  auto state = elastic_joins(2, 4, 2, 0, JoinPolicy::kAtFailure);
  step(state, late_hello(7, "host9"), at(20'000ms));
  step(state, NodeDone{1}, at(30'000ms));
  auto done = find_one<Broadcast>(step(state, NodeDone{2}, at(30'001ms)));
  CHECK(std::holds_alternative<CompleteMsg>(done.message));
  CHECK(done.conns == std::vector<ConnId>{1, 2, 7});
  CHECK(state.phase == Phase::kComplete);
  CHECK(state.restart_count == 0);
}

TEST_CASE("join_min_interval: joiners within the interval wait and are placed together once it has passed") {
  auto state = elastic_joins(2, 5, 2, 0, JoinPolicy::kNow, 60'000ms);  // the round started at 10 s
  auto first = step(state, late_hello(7, "hostA"), at(20'000ms));
  CHECK(find_all<Broadcast>(first).empty());
  CHECK(logs(first, "it waits for the next round (join_min_interval 60.0 s: the round has run 10.0 s)"));
  CHECK(find_all<Broadcast>(step(state, late_hello(8, "hostB"), at(40'000ms))).empty());
  CHECK(next_deadline(state) == Clock::time_point{} + 70'000ms);
  CHECK(find_all<Broadcast>(step(state, Tick{}, at(69'999ms))).empty());
  auto stop = find_one<Broadcast>(step(state, Tick{}, at(70'000ms)));
  CHECK(stop.conns == std::vector<ConnId>{1, 2});
  const auto& msg = std::get<StopMsg>(stop.message);
  CHECK(msg.membership);
  CHECK(msg.reason == "re-forming the job: host \"hostA\" (10.0.0.9) and 1 more joined, 4 nodes in the next round "
                      "(a membership change: no restart used)");
  CHECK(msg.root_cause.host == "hostA");
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 2}, at(70'010ms)));
  CHECK(send.round.nnodes == 4);
  CHECK(send.round.restart_count == 1);  // one re-form for both
  CHECK(rank_of(send, 7) == 2);
  CHECK(rank_of(send, 8) == 3);
  CHECK(state.failure_restarts == 0);
}

TEST_CASE("join_min_interval counts from the latest round: a join after it re-forms at once, the next waits again") {
  auto state = elastic_joins(1, 4, 1, 0, JoinPolicy::kNow, 60'000ms);  // one node: the round started at 10 s
  CHECK(find_one<Broadcast>(step(state, late_hello(7, "hostA"), at(70'000ms))).conns == std::vector<ConnId>{1});
  find_one<SendAssignments>(all_stopped(state, {1}, at(70'500ms)));  // round 1 starts at 70.5 s
  CHECK(find_all<Broadcast>(step(state, late_hello(8, "hostB"), at(100'000ms))).empty());
  CHECK(next_deadline(state) == Clock::time_point{} + 130'500ms);
  CHECK(find_one<Broadcast>(step(state, Tick{}, at(130'500ms))).conns == std::vector<ConnId>{1, 7});
}

TEST_CASE("join_min_interval: a failure's re-form within the interval places the waiting joiner at once") {
  auto state = elastic_joins(2, 4, 2, 1, JoinPolicy::kNow, 600'000ms);
  CHECK(find_all<Broadcast>(step(state, late_hello(7, "host9"), at(20'000ms))).empty());
  auto stop = find_one<Broadcast>(step(state, FailureReport{1, worker_exit(0)}, at(21'000ms)));
  CHECK(std::get<StopMsg>(stop.message).reason == "restarting the job (restart 1 of 1)");
  CHECK(state.failure_restarts == 1);
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 2}, at(21'010ms)));
  CHECK(rank_of(send, 7) == 2);
  CHECK(send.round.nnodes == 3);
}

TEST_CASE("join policies: the names, and at_failure with an interval is refused as contradictory") {
  JoinPolicy policy = JoinPolicy::kNow;
  CHECK(parse_join_policy("at_failure", policy));
  CHECK(policy == JoinPolicy::kAtFailure);
  CHECK(std::string(to_string(policy)) == "at_failure");
  CHECK(parse_join_policy("now", policy));
  CHECK(policy == JoinPolicy::kNow);
  CHECK_FALSE(parse_join_policy("later", policy));
  CHECK_FALSE(parse_join_policy("", policy));
  JobConfig config = job(3, false);
  config.min_nodes = 1;
  config.join_policy = JoinPolicy::kAtFailure;
  config.join_min_interval = 5'000ms;
  CHECK_THROWS_WITH_AS(validate(config), "join_min_interval applies to join_policy now: with at_failure a join never "
                                         "re-forms the job", RendezvousError);
  config.join_min_interval = 0ms;
  CHECK_NOTHROW(validate(config));
}

namespace {
HangViewMsg hung_view(int rank, bool suspect, bool quiet = false) {
  RankBeat r;
  r.rank = rank;
  r.local_rank = 0;
  r.pid = 1000 + rank;
  r.step = 5;
  r.silent_ms = quiet ? 9000 : 3000;
  r.hung = !quiet;
  r.quiet = quiet;
  r.quiet_left_ms = quiet ? 30'000 : 0;
  HangViewMsg v;
  v.suspect = suspect;
  v.ranks = {r};
  return v;
}
}  // namespace

// Issue 32: a node joining during a hang inquiry re-formed the job for the join; the hang was never judged, no
// restart charged, its stacks never referenced.
TEST_CASE("elastic: a node that joins during a hang inquiry waits for the verdict, which restarts the job with it") {
  auto state = elastic(2, 4, 2, 1);
  const int r0 = 0, r1 = 2;  // two workers per node: node 0 holds ranks 0-1, node 1 ranks 2-3
  step(state, HangReport{1, hung_view(r0, true)}, at(20'000ms));
  REQUIRE(state.hang.has_value());
  auto joined = step(state, late_hello(7, "host9"), at(20'100ms));
  CHECK(refusal(joined, 7).empty());
  CHECK(find_all<Broadcast>(joined).empty());  // no re-form for the join yet
  bool said = false;
  for (const auto& log : find_all<Log>(joined)) said |= log.text.find("a hang inquiry is under way") != std::string::npos;
  CHECK(said);
  CHECK(state.phase == Phase::kRunning);
  // The other node answers: the verdict stops the job as a failure (a restart is charged), and the newcomer is
  // placed in the round that follows.
  auto decided = step(state, HangReport{2, hung_view(r1, false)}, at(21'000ms));
  auto stop = find_one<Broadcast>(decided);
  const auto& msg = std::get<StopMsg>(stop.message);
  CHECK(is_hang(msg.root_cause));
  CHECK_FALSE(msg.membership);
  CHECK(state.failure_restarts == 1);
  auto send = find_one<SendAssignments>(all_stopped(state, {1, 2}, at(21'100ms)));
  CHECK(send.round.nnodes == 3);
}

TEST_CASE("elastic: a join that waited for an inquiry deferred by a quiet phase re-forms the job then") {
  auto state = elastic(2, 4, 2, 1);
  step(state, HangReport{1, hung_view(0, true)}, at(20'000ms));
  step(state, late_hello(7, "host9"), at(20'100ms));
  auto deferred = step(state, HangReport{2, hung_view(2, false, /*quiet=*/true)}, at(21'000ms));
  bool told = false, reformed = false;
  for (const auto& b : find_all<Broadcast>(deferred)) {
    told |= std::holds_alternative<HangDeferredMsg>(b.message);
    if (const auto* s = std::get_if<StopMsg>(&b.message)) reformed = s->membership;
  }
  CHECK(told);
  CHECK(reformed);  // the waiting joiner's re-form, now that nobody is judged
  CHECK(state.failure_restarts == 0);
}

TEST_CASE("a standalone server keeps no node to tell for a departure that re-formed the job") {
  // A node lost on a reset is remembered for its return only when its loss stopped the job: an elastic re-form
  // goes on without it, and a server that later ended would otherwise wait for it (its reconnect timeout).
  JobConfig config = job(3, false);
  config.min_nodes = 2;
  config.resumable = true;
  config.heartbeat_timeout = 600s;
  RendezvousState state(config, at(0ms).steady);
  join_all(state, 3, at(0ms));
  REQUIRE(state.phase == Phase::kRunning);
  step(state, Disconnected{2, "connection reset"}, at(1'000ms));
  CHECK(state.phase != Phase::kStopped);
  CHECK(state.untold_silent.empty());
}

TEST_CASE("elastic: meet goes to every node of the round once all said round_ready, once, for that round only") {
  auto state = elastic(2, 4, 2, 2);
  REQUIRE(state.restart_count == 0);
  // A joiner: the round re-forms (membership), the two nodes' workers stay, the joiner's start anew.
  step(state, late_hello(3, "host2"), at(20'000ms));
  REQUIRE(state.phase == Phase::kRestarting);
  CHECK(step(state, RoundReady{1, 0}, at(20'001ms)).empty());  // a word for the round before: not counted
  all_stopped(state, {1, 2}, at(20'002ms));
  REQUIRE(state.phase == Phase::kRunning);
  REQUIRE(state.restart_count == 1);
  CHECK(step(state, RoundReady{1, 0}, at(20'003ms)).empty());  // late, for round 0: ignored
  CHECK(find_all<Broadcast>(step(state, RoundReady{1, 1}, at(20'004ms))).empty());
  CHECK(find_all<Broadcast>(step(state, RoundReady{2, 1}, at(20'005ms))).empty());
  CHECK(find_all<Broadcast>(step(state, RoundReady{2, 1}, at(20'006ms))).empty());  // said twice: once
  // The joiner's workers are past their imports: every node is told to meet.
  auto meet = find_one<Broadcast>(step(state, RoundReady{3, 1}, at(22'000ms)));
  CHECK(meet.conns.size() == 3);
  CHECK(std::get<MeetMsg>(meet.message).round == 1);
  CHECK(find_all<Broadcast>(step(state, RoundReady{3, 1}, at(22'001ms))).empty());
}

// Issue 53, the nemesis with default heartbeats (seed 11): a node whose agent stopped its workers for its server's
// silence joins again as a new node while its old place still counts (a one-way cut lets its frames through, or its
// closed connection's place waits for a resume). The job, full, refused it ("the job already has 3 nodes") and the
// node exited 77 naming the refusal. Its agent's seat is its own across its clients: the old place goes, and it joins.
TEST_CASE("elastic: a node back from its fence with its own seat replaces its stale place; another seat does not") {
  for (bool own_seat : {true, false}) {
    CAPTURE(own_seat);
    JobConfig config = job(3, false);
    config.min_nodes = 2;
    config.heartbeat_timeout = 600s;
    RendezvousState state(config, at(0ms).steady);
    for (int i = 0; i < 3; ++i) {
      Joiner j;
      j.conn = static_cast<ConnId>(i + 1);
      j.host = "host" + std::to_string(i);
      j.seat_secret = "seat" + std::to_string(i);
      step(state, hello(j), at(0ms));
    }
    REQUIRE(state.phase == Phase::kRunning);
    Joiner back;
    back.conn = 9;
    back.host = "host2";
    back.seat_secret = own_seat ? "seat2" : "someone else's";
    Hello h = hello(back);
    h.hello.after_round = 0;
    auto actions = step(state, h, at(20'000ms));
    if (own_seat) {
      CHECK(refusal(actions, 9).empty());
      CHECK(state.nodes.count(3) == 0);  // its stale place gone: the job re-forms without it, and with it anew
      CHECK(state.nodes.count(9) == 1);
      CHECK(state.phase == Phase::kRestarting);
    } else {
      CHECK(refusal(actions, 9).find("the most --nnodes") != std::string::npos);  // full, as before
      CHECK(state.nodes.count(3) == 1);
    }
  }
}
