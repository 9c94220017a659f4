// Hostile or mistaken peers against the real server: each is refused or cut off, and the job goes on.
#include "tests/rendezvous/socket_fixture.hpp"

#include "rendezvous/server_live_view.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {
// A two-node static job where node 0 (a real client) has joined and waits for node 1.
struct HalfJoined {
  asio::io_context io;
  Server server{io, test_job(2, true), quiet_logger()};
  std::unique_ptr<Agent> node0;

  HalfJoined() {
    server.start("127.0.0.1", 0);
    node0 = start_agent(io, client_config(server.port(), 0, 1));
    REQUIRE(run_until(io, [&] { return server.state().nodes.size() == 1; }));
  }

  // The job is undisturbed: node 1 can still join and both get their assignments.
  void check_job_still_runs() {
    auto node1 = start_agent(io, client_config(server.port(), 1, 1));
    CHECK(run_until(io, [&] { return !node0->events.assignments.empty() && !node1->events.assignments.empty(); }));
    CHECK_FALSE(node0->events.error);
    if (node0->events.error) MESSAGE(node0->events.error->message);
  }
};

std::string refusal_of(RawPeer& peer) {
  auto payload = peer.read_frame();
  REQUIRE(payload);
  auto message = decode_server_message(*payload);
  REQUIRE(std::holds_alternative<ErrorMsg>(message));
  return std::get<ErrorMsg>(message).message;
}
}  // namespace

// Issue 33: an agent believes a server only once it proves the job's token and run id, so an agent given
// another token never says anything to this server (it cannot tell it from an impostor): it says why at once,
// keeps looking until its timeout, and ends with that reason. The server's refusal is for foreign clients.
TEST_CASE("an agent with a wrong token trusts no server, says why, and the job is undisturbed") {
  HalfJoined job;
  auto config = client_config(job.server.port(), 1, 1);
  config.token = "wrong";
  config.connect_timeout = 1500ms;
  auto intruder = start_agent(job.io, config);
  REQUIRE(run_until(job.io, [&] { return intruder->events.error.has_value(); }, 5000ms));
  CHECK(intruder->events.error->kind == ErrorKind::kTimeout);
  CHECK(intruder->events.error->message.find("did not prove it knows this job's token and run id: another job's "
                                             "server, one given another token (check --rdzv-id and "
                                             "--rdzv-token-file / DDPRUN_TOKEN / --rdzv-token") != std::string::npos);
  job.check_job_still_runs();
}

TEST_CASE("a foreign client with a wrong token is refused with a clear message") {
  HalfJoined job;
  RawPeer peer(job.io, job.server.port());
  peer.handshake(1, 1, "wrong");
  CHECK(refusal_of(peer) == "authentication failed: wrong job token or run id (check --rdzv-id, and "
                         "--rdzv-token-file / DDPRUN_TOKEN / --rdzv-token)");
  job.check_job_still_runs();
}

TEST_CASE("a wrong run id is refused with the same bytes as a wrong token: no run-id oracle") {
  HalfJoined job;
  // On the wire: a stranger with a made-up run id, one with the real run id and a guessed token, and one
  // with both wrong read exactly the same frame.
  auto answer = [&](const std::string& run_id, const std::string& token) {
    RawPeer peer(job.io, job.server.port());
    peer.handshake(1, 1, token, kProtocolVersion, run_id);
    auto frame = peer.read_frame();
    CHECK(peer.wait_closed());
    return frame.value_or("");
  };
  const std::string other_run = answer("other-job", "s3cret");
  CHECK(other_run.find("\"type\":\"error\"") != std::string::npos);
  CHECK(answer("job42", "guess") == other_run);
  CHECK(answer("nope", "guess") == other_run);
  job.check_job_still_runs();
}

TEST_CASE("a duplicate node rank is refused on the offending node only") {
  HalfJoined job;
  auto twin = start_agent(job.io, client_config(job.server.port(), 0, 1, "twin"));
  REQUIRE(run_until(job.io, [&] { return twin->events.error.has_value(); }));
  CHECK(twin->events.error->message.find("duplicate node rank 0") != std::string::npos);
  job.check_job_still_runs();
}

TEST_CASE("an out-of-range node rank is refused naming the range") {
  HalfJoined job;
  auto stray = start_agent(job.io, client_config(job.server.port(), 7, 1));
  REQUIRE(run_until(job.io, [&] { return stray->events.error.has_value(); }));
  CHECK(stray->events.error->message.find("node rank 7 is out of range: --nnodes 2 allows 0..1") != std::string::npos);
  job.check_job_still_runs();
}

TEST_CASE("another protocol version is refused with a clear message") {
  HalfJoined job;
  RawPeer peer(job.io, job.server.port());
  peer.handshake(1, 1, "s3cret", kProtocolVersion + 1);
  CHECK(refusal_of(peer).find("protocol version mismatch") != std::string::npos);
  CHECK(peer.wait_closed());
  job.check_job_still_runs();
}

TEST_CASE("garbage bytes to the port close that connection only") {
  HalfJoined job;
  RawPeer peer(job.io, job.server.port());
  peer.send_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n");  // "GET " reads as a 1.2 GB frame length
  CHECK(peer.wait_closed());
  RawPeer json_garbage(job.io, job.server.port());
  json_garbage.send_bytes(encode_frame("{not json"));
  CHECK(json_garbage.wait_closed());
  job.check_job_still_runs();
}

TEST_CASE("an oversized frame closes that connection only") {
  HalfJoined job;
  RawPeer peer(job.io, job.server.port());
  peer.send_bytes(std::string("\x00\x20\x00\x00", 4) + std::string(1000, 'x'));  // announces 2 MiB
  CHECK(peer.wait_closed());
  job.check_job_still_runs();
}

TEST_CASE("a truncated frame closes that connection only, at hang-up or at the handshake deadline") {
  HalfJoined job;
  RawPeer hangs_up(job.io, job.server.port());
  hangs_up.send_bytes(encode_frame(R"({"type":"heartbeat"})").substr(0, 10));
  hangs_up.close();
  RawPeer stalls(job.io, job.server.port());
  stalls.send_bytes(encode_frame(R"({"type":"heartbeat"})").substr(0, 10));
  auto started = std::chrono::steady_clock::now();
  CHECK(stalls.wait_closed(2000ms));  // heartbeat_timeout is 400 ms in test_job
  CHECK(std::chrono::steady_clock::now() - started < 1500ms);
  job.check_job_still_runs();
}

TEST_CASE("a message before the hello closes that connection") {
  HalfJoined job;
  RawPeer peer(job.io, job.server.port());
  peer.send(HeartbeatMsg{});
  CHECK(peer.wait_closed());
  job.check_job_still_runs();
}

TEST_CASE("a joined node whose heartbeats stop is lost after the deadline and every other node is stopped") {
  HalfJoined job;
  RawPeer mute(job.io, job.server.port());
  mute.handshake(1, 1);  // joins as node 1, then never says another word
  REQUIRE(run_until(job.io, [&] { return !job.node0->events.assignments.empty(); }));
  auto assigned_at = std::chrono::steady_clock::now();
  REQUIRE(run_until(job.io, [&] { return !job.node0->events.stops.empty(); }, 3000ms));
  auto took = std::chrono::steady_clock::now() - assigned_at;
  CHECK(took >= 350ms);
  CHECK(took < 1000ms);
  const Failure& cause = job.node0->events.stops[0].root_cause;
  CHECK(cause.node_rank == 1);
  CHECK(cause.host == "rawhost");
  CHECK(cause.message == "missed heartbeats for 0.4 s");
}

namespace {
// Three static nodes of one rank each, straggler naming with 1 ms persistence: a rank is named at the second
// judgement that finds it past the line (the server judges once a second).
struct ThreeRanks {
  asio::io_context io;
  Server server{io, job(), quiet_logger()};
  std::vector<std::unique_ptr<Agent>> nodes;

  static JobConfig job() {
    JobConfig config = test_job(3, true);
    config.stragglers.persist = 1ms;
    return config;
  }
  ThreeRanks() {
    server.start("127.0.0.1", 0);
    for (int r = 0; r < 3; ++r) nodes.push_back(start_agent(io, client_config(server.port(), r, 1)));
    REQUIRE(run_until(io, [&] {
      for (auto& n : nodes)
        if (n->events.assignments.empty()) return false;
      return true;
    }));
  }
  void status(int node, std::vector<RankPace> paces) { nodes[static_cast<std::size_t>(node)]->client->report_status("{}", std::move(paces)); }
  // The ranks named in the last message node 0 heard (none heard: none named).
  std::vector<int> named() const {
    std::vector<int> out;
    if (!nodes[0]->events.stragglers.empty())
      for (const Straggler& s : nodes[0]->events.stragglers.back().named) out.push_back(s.rank);
    return out;
  }
};
}  // namespace

// Issue 33: a status's paces were not checked against the sender's ranks. An insider (node 2) that reports
// the honest ranks 0 and 1 fifty times slower, and ranks far outside the world, got them named (and, under
// --straggler-action stop, SIGKILLed). Its foreign paces are ignored now; a rank slow by its own node's report
// is still named.
TEST_CASE("an insider's paces of other nodes' ranks are ignored; a node's own slow rank is still named") {
  ThreeRanks job;
  for (int i = 0; i < 3; ++i) {
    job.status(0, {RankPace{0, 1000, 500}});
    job.status(1, {RankPace{1, 1000, 500}});
    job.status(2, {RankPace{0, 1000, 25'000}, RankPace{1, 1000, 25'000}, RankPace{2, 1000, 500},
                   RankPace{1'000'000, 1000, 1}, RankPace{1'000'001, 1000, 1}});
    run_for(job.io, 700ms);
  }
  CHECK(job.named().empty());
  job.status(1, {RankPace{1, 1000, 5000}});  // rank 1's own node: ten times the others' work
  REQUIRE(run_until(job.io, [&] { return !job.named().empty(); }, 3000ms));
  CHECK(job.named() == std::vector<int>{1});
}

// Issue 33: every view_request made the server build and encode every node's status (up to a MiB at 10 000
// nodes), so one node asking in a loop cost the server work that grows with the job. Now the view is built once
// per kViewEvery and every answer in that period shares its frame: a flood gets identical views.
TEST_CASE("a flood of view requests is answered from one view per period, and every node gets its view") {
  ThreeRanks job;
  job.status(0, {RankPace{0, 1000, 500}});
  job.status(1, {RankPace{1, 1000, 500}});
  job.status(2, {RankPace{2, 1000, 500}});
  run_for(job.io, 50ms);
  for (int i = 0; i < 200; ++i) job.nodes[2]->client->request_view();
  job.nodes[1]->client->request_view();
  REQUIRE(run_until(job.io, [&] { return job.nodes[2]->events.views.size() == 200 &&
                                         job.nodes[1]->events.views.size() == 1; }, 5000ms));
  const JobViewMsg& first = job.nodes[2]->events.views[0];
  CHECK(first.nodes.size() == 3);  // every connected node's latest status
  for (const JobViewMsg& v : job.nodes[2]->events.views) CHECK(v.ages_ms == first.ages_ms);  // one view, built once
  run_for(job.io, ServerLiveView::kViewEvery + 50ms);
  job.nodes[2]->client->request_view();  // a period later: built again (the statuses have aged)
  REQUIRE(run_until(job.io, [&] { return job.nodes[2]->events.views.size() == 201; }, 3000ms));
  CHECK(job.nodes[2]->events.views[200].ages_ms != first.ages_ms);
}
