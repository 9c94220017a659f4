#include <doctest/doctest.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/protocol.hpp"
#include "rendezvous/recorded_end.hpp"
#include "tests/rendezvous/sample_messages.hpp"

using namespace ddprun::rendezvous;

using ddprun::rendezvous::testing::sample_failure;

TEST_CASE("client messages survive an encode/decode round trip") {
  HelloMsg hello;
  hello.run_id = "job1";
  hello.mac = "ab";
  hello.node_rank = 2;
  hello.nproc = 4;
  hello.host = "h";
  hello.address = "10.0.0.2";
  hello.master_port = 29500;
  hello.cannot_join = "munged is down";
  auto back = std::get<HelloMsg>(decode_client_message(encode(ClientMessage{hello})));
  CHECK(back.run_id == "job1");
  CHECK(back.cannot_join == "munged is down");
  CHECK(back.node_rank == std::optional<int>(2));
  CHECK(back.nproc == 4);
  CHECK(back.address == "10.0.0.2");
  CHECK(back.master_port == 29500);
  CHECK(std::get<FailureMsg>(decode_client_message(encode(ClientMessage{FailureMsg{sample_failure()}}))).failure ==
        sample_failure());
  CHECK(std::holds_alternative<HeartbeatMsg>(decode_client_message(encode(ClientMessage{HeartbeatMsg{}}))));
  CHECK_FALSE(std::get<NodeDoneMsg>(decode_client_message(encode(ClientMessage{NodeDoneMsg{}}))).noticed);
  CHECK(std::get<NodeDoneMsg>(decode_client_message(encode(ClientMessage{NodeDoneMsg{true}}))).noticed);
  CHECK(encode(ClientMessage{NodeDoneMsg{}}).find("noticed") == std::string::npos);  // as an older agent's
  CHECK(std::get<StoppedMsg>(decode_client_message(encode(ClientMessage{StoppedMsg{}}))).master_port == 0);
  CHECK(std::get<StoppedMsg>(decode_client_message(encode(ClientMessage{StoppedMsg{40123}}))).master_port == 40123);
  CHECK_THROWS_AS(decode_client_message(R"({"type":"stopped","master_port":70000})"), ProtocolError);
  HangViewMsg hang;
  hang.suspect = true;
  hang.stacks = "/tmp/x/hang_stacks.txt";
  hang.ranks = {RankBeat{4, 0, 77, 41, 3000, false, true, false, true, "all_reduce", 0, true, false},
                RankBeat{5, 1, 78, -1, 60000, true, false, true, false, "", 42'000, false, true}};
  auto h = std::get<HangViewMsg>(decode_client_message(encode(ClientMessage{hang})));
  CHECK(h.suspect);
  CHECK_FALSE(h.held);
  hang.held = true;  // the node's workers train on in the previous round (a round held for meet)
  CHECK(std::get<HangViewMsg>(decode_client_message(encode(ClientMessage{hang}))).held);
  CHECK(h.stacks == hang.stacks);
  CHECK(h.ranks == hang.ranks);
  // An older agent's view has neither the quiet bound nor the stopped flag: not stopped, bound not said.
  const auto old = std::get<HangViewMsg>(decode_client_message(
      R"({"type":"hang_view","ranks":[{"rank":1,"local_rank":0,"pid":9,"step":3,"silent_ms":10,"quiet":true}],"stacks":""})"));
  CHECK(old.ranks.at(0).quiet);
  CHECK(old.ranks.at(0).quiet_left_ms == 0);
  CHECK_FALSE(old.ranks.at(0).stopped);
  CHECK_FALSE(old.held);
  // Meeting before an in-place round is handed over (round_ready, meet).
  CHECK(std::get<MeetMsg>(decode_server_message(encode(ServerMessage{MeetMsg{7}}))).round == 7);
  CHECK(std::get<RoundReadyMsg>(decode_client_message(encode(ClientMessage{RoundReadyMsg{7}}))).round == 7);
  CHECK_THROWS_AS(decode_client_message(R"({"type":"round_ready","round":-1})"), ProtocolError);
  // The server's deferral of a verdict for a declared quiet phase, and its bounds.
  const HangDeferredMsg deferred{{0, 5}, 58'000, {}};
  CHECK(std::get<HangDeferredMsg>(decode_server_message(encode(ServerMessage{deferred}))) == deferred);
  CHECK_THROWS_AS(decode_server_message(R"({"type":"hang_deferred","quiet_ranks":[-1],"wait_ms":5})"), ProtocolError);
  CHECK_THROWS_AS(decode_server_message(R"({"type":"hang_deferred","quiet_ranks":[1],"wait_ms":0})"), ProtocolError);
  CHECK_THROWS_AS(decode_server_message(R"({"type":"hang_deferred","quiet_ranks":"1","wait_ms":5})"), ProtocolError);
  // An inquiry cleared by ranks that beat again during the capture (issue 56): recovered ranks, no wait; never both,
  // never neither.
  const HangDeferredMsg cleared{{}, 0, {2, 3}};
  CHECK(std::get<HangDeferredMsg>(decode_server_message(encode(ServerMessage{cleared}))) == cleared);
  CHECK_THROWS_AS(decode_server_message(R"({"type":"hang_deferred","quiet_ranks":[],"wait_ms":0})"), ProtocolError);
  CHECK_THROWS_AS(decode_server_message(R"({"type":"hang_deferred","quiet_ranks":[1],"wait_ms":5,"recovered":[2]})"),
                  ProtocolError);
  RankBeat beat_again;
  beat_again.rank = 3;
  beat_again.recovered = true;
  HangViewMsg with_back;
  with_back.ranks = {beat_again};
  CHECK(std::get<HangViewMsg>(decode_client_message(encode(ClientMessage{with_back}))).ranks.at(0).recovered);
  CHECK_FALSE(std::get<HangViewMsg>(decode_client_message(R"({"type":"hang_view","ranks":[],"stacks":""})")).suspect);
}

TEST_CASE("a hang view's ranks are bounded like every field from a peer") {
  CHECK_THROWS_AS(decode_client_message(R"({"type":"hang_view","ranks":{},"stacks":""})"), ProtocolError);
  CHECK_THROWS_AS(decode_client_message(R"({"type":"hang_view","ranks":[7],"stacks":""})"), ProtocolError);
  CHECK_THROWS_AS(decode_client_message(
                      R"({"type":"hang_view","stacks":"","ranks":[{"rank":-1,"local_rank":0,"pid":1,"step":1,"silent_ms":1}]})"),
                  ProtocolError);
  CHECK_THROWS_AS(decode_client_message(
                      R"({"type":"hang_view","stacks":"","ranks":[{"rank":1,"local_rank":0,"pid":1,"step":1,"silent_ms":-5}]})"),
                  ProtocolError);
  CHECK_THROWS_AS(decode_client_message(R"({"type":"hang_view","ranks":[]})"), ProtocolError);  // no stacks
}

TEST_CASE("an assignment carries heterogeneous nprocs run-length encoded") {
  Round round = make_round({4, 4, 2, 4}, "10.0.0.1", 29500, "job", 1, 3);
  CHECK(round.world_size == 14);
  CHECK(round.nprocs_runs == std::vector<std::pair<int, int>>{{4, 2}, {2, 1}, {4, 1}});
  auto a = std::get<Assignment>(decode_server_message(encode_assignment(encode_round(round), 2, 8)));
  CHECK(a.node_rank == 2);
  CHECK(a.rank_offset == 8);
  CHECK(a.nnodes == 4);
  CHECK(a.world_size == 14);
  CHECK(a.nprocs == std::vector<int>{4, 4, 2, 4});
  CHECK(a.local_world_size() == 2);
  CHECK(a.master_addr == "10.0.0.1");
  CHECK(a.master_port == 29500);
  CHECK(a.restart_count == 1);
  CHECK(a.max_restarts == 3);
  CHECK(a.fence == 0);  // absent: no election decides the host
  round.fence = 123456789012;  // an etcd revision
  CHECK(std::get<Assignment>(decode_server_message(encode_assignment(encode_round(round), 2, 8))).fence ==
        123456789012);
  a.fence = 77;
  CHECK(std::get<Assignment>(decode_server_message(encode(ServerMessage{a}))).fence == 77);
}

TEST_CASE("server messages survive an encode/decode round trip") {
  ChallengeMsg challenge{kProtocolName, kProtocolVersion, "0123abcd", 1000, 5000, false, "beef"};
  auto c = std::get<ChallengeMsg>(decode_server_message(encode(ServerMessage{challenge})));
  CHECK(c.nonce == "0123abcd");
  CHECK(c.heartbeat_timeout_ms == 5000);
  CHECK(c.proof == "beef");
  auto e = std::get<ErrorMsg>(decode_server_message(encode(ServerMessage{ErrorMsg{ErrorKind::kTimeout, "late"}})));
  CHECK(e.kind == ErrorKind::kTimeout);
  CHECK(e.message == "late");
  auto u = std::get<ErrorMsg>(decode_server_message(encode(ServerMessage{ErrorMsg{ErrorKind::kUnavailable, "x"}})));
  CHECK(u.kind == ErrorKind::kUnavailable);
  auto s = std::get<StopMsg>(decode_server_message(encode(ServerMessage{StopMsg{sample_failure(), "why", true}})));
  CHECK(s.root_cause == sample_failure());
  CHECK(s.restarting);
  CHECK_FALSE(std::get<CompleteMsg>(decode_server_message(encode(ServerMessage{CompleteMsg{}}))).noticed);
  CHECK(std::get<CompleteMsg>(decode_server_message(encode(ServerMessage{CompleteMsg{true}}))).noticed);
  CHECK(std::holds_alternative<HeartbeatAckMsg>(decode_server_message(encode(ServerMessage{HeartbeatAckMsg{}}))));
  CHECK(std::holds_alternative<CaptureMsg>(decode_server_message(encode(ServerMessage{CaptureMsg{}}))));
}

TEST_CASE("malformed payloads are protocol errors") {
  for (std::string bad : std::vector<std::string>{"", "not json", "[1,2]", R"({"no":"type"})", R"({"type":"bogus"})",
                          R"({"type":"hello","v":"1"})", R"({"type":"failure","failure":{"rank":1}})",
                          std::string(100, '[') + std::string(100, ']')}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(decode_client_message(bad), ProtocolError);
  }
}

TEST_CASE("an assignment whose nprocs do not add up is a protocol error") {
  std::string round = R"({"nnodes":3,"world_size":8,"nprocs_runs":[[4,2],[4,5]],"master_addr":"a","master_port":1,)"
                      R"("run_id":"r","restart_count":0,"max_restarts":0})";
  CHECK_THROWS_AS(decode_server_message(encode_assignment(round, 0, 0)), ProtocolError);
  std::string huge = R"({"nnodes":3,"world_size":8,"nprocs_runs":[[4,2000000000]],"master_addr":"a","master_port":1,)"
                     R"("run_id":"r","restart_count":0,"max_restarts":0})";
  CHECK_THROWS_AS(decode_server_message(encode_assignment(huge, 0, 0)), ProtocolError);
}

TEST_CASE("invalid UTF-8 in an error file is replaced, not fatal") {
  Failure f = sample_failure();
  f.error_file_contents = "bad \xff\xfe bytes";
  auto back = std::get<FailureMsg>(decode_client_message(encode(ClientMessage{FailureMsg{f}})));
  CHECK(back.failure.error_file_contents.find("bad ") == 0);
}

TEST_CASE("a huge error file is truncated to keep the frame bounded") {
  Failure f = sample_failure();
  f.error_file_contents = std::string(kMaxErrorFileBytes * 2, 'x');
  std::string payload = encode(ClientMessage{FailureMsg{f}});
  CHECK(payload.size() < kMaxErrorFileBytes + 1024);
}

TEST_CASE("a failure describes itself for people") {
  Failure f = sample_failure();
  CHECK(describe(f) == "rank 5 (local rank 1, node 1, host gpu7, pid 4242) exited with code 3");
  CHECK(exit_status_of(f) == 3);
  f.exit_code.reset();
  f.kind = FailureKind::kSignaled;
  f.signal = 9;
  CHECK(describe(f) == "rank 5 (local rank 1, node 1, host gpu7, pid 4242) was killed by signal 9 (SIGKILL)");
  CHECK(exit_status_of(f) == 137);
  f.kind = FailureKind::kHung;
  f.message = "hung: no heartbeat for 5.0 s";
  CHECK(exit_status_of(f) == 78);  // a hang, not an OOM kill
  Failure node;
  node.kind = FailureKind::kNodeLost;
  node.node_rank = 2;
  node.host = "gpu9";
  node.message = "missed heartbeats for 5.0 s";
  CHECK(describe(node) == "node 2 (host gpu9) lost: missed heartbeats for 5.0 s");
  Failure stopped = node;
  stopped.kind = FailureKind::kAgentStopped;
  stopped.signal = 2;
  stopped.message = "its ddprun received SIGINT";
  CHECK(describe(stopped) == "ddprun on node 2 (host gpu9) received SIGINT");  // not "lost"
  CHECK(exit_status_of(node) == 1);
}

TEST_CASE("a worker whose exec failed is described by its reason, with no pid") {
  Failure f = sample_failure();
  f.pid = 0;
  f.exit_code = 127;
  f.message = "cannot execute './train': No such file or directory";
  CHECK(describe(f) == "rank 5 (local rank 1, node 1, host gpu7) could not be started (exit code 127): cannot "
                       "execute './train': No such file or directory");
  CHECK(exit_status_of(f) == 127);
}

TEST_CASE("a newcomer's re-form names a join, not a lost node") {
  Failure joined;
  joined.kind = FailureKind::kJoined;
  joined.host = "vm";
  joined.message = kJoinedMessage;
  CHECK(is_join(joined));
  CHECK(describe(joined) == "host vm joined the job");  // was "node -1 (host vm) lost: joined the job"
  Failure lost = joined;  // the same message, another kind: the kind decides, not the words
  lost.kind = FailureKind::kNodeLost;
  lost.node_rank = 1;
  CHECK_FALSE(is_join(lost));
}

TEST_CASE("a node's status carries its ranks' paces; the server names stragglers; both bounded") {
  NodeStatusMsg status{R"({"node_rank":0})", {RankPace{0, 150000, 100000}, RankPace{3, 150000, -1}}};
  auto s = std::get<NodeStatusMsg>(decode_client_message(encode(ClientMessage{status})));
  CHECK(s.status == status.status);
  CHECK(s.paces == status.paces);
  CHECK(std::get<NodeStatusMsg>(decode_client_message(R"({"type":"node_status","status":"{}"})")).paces.empty());
  CHECK_THROWS_AS(decode_client_message(R"({"type":"node_status","status":"{}","paces":[{"rank":0,"step_us":-5,"work_us":1}]})"),
                  ProtocolError);
  CHECK_THROWS_AS(decode_client_message(R"({"type":"node_status","status":"{}","paces":{}})"), ProtocolError);
  StragglersMsg named{{Straggler{1, 0, "n1", 150000, 100000, true}, Straggler{7, 3, "n4", 90, 60, false}}};
  CHECK(std::get<StragglersMsg>(decode_server_message(encode(ServerMessage{named}))).named == named.named);
  CHECK(std::get<StragglersMsg>(decode_server_message(R"({"type":"stragglers","named":[]})")).named.empty());
  CHECK_THROWS_AS(decode_server_message(R"({"type":"stragglers"})"), ProtocolError);
  CHECK_THROWS_AS(decode_server_message(R"({"type":"stragglers","named":[{"rank":1}]})"), ProtocolError);
}
// ---- resume after a server restart (issue 19) ----
TEST_CASE("a resume hello carries the round this node runs, bounded and consistent in itself") {
  Assignment a;
  a.node_rank = 1;
  a.nnodes = 2;
  a.rank_offset = 2;
  a.world_size = 5;
  a.nprocs = {2, 3};
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  a.restart_count = 3;
  HelloMsg hello;
  hello.run_id = "job1";
  hello.mac = "ab";
  hello.nproc = 3;
  hello.host = "h";
  hello.master_port = 1;
  hello.resume = resume_claim_of(a);
  CHECK(hello.resume->fingerprint == nprocs_fingerprint({2, 3}));
  CHECK(nprocs_fingerprint({2, 3}) != nprocs_fingerprint({3, 2}));
  CHECK(nprocs_fingerprint({2, 3}).size() == 16);
  const std::string payload = encode(ClientMessage{hello});
  auto back = std::get<HelloMsg>(decode_client_message(payload));
  REQUIRE(back.resume);
  CHECK(*back.resume == *hello.resume);
  HelloMsg plain = hello;
  plain.resume.reset();
  CHECK_FALSE(std::get<HelloMsg>(decode_client_message(encode(ClientMessage{plain}))).resume);
  auto with = [&](const char* key, nlohmann::json value) {
    auto j = nlohmann::json::parse(payload);
    j["resume"][key] = std::move(value);
    return j.dump();
  };
  CHECK_THROWS_AS(decode_client_message(with("node_rank", 2)), ProtocolError);      // outside nnodes
  CHECK_THROWS_AS(decode_client_message(with("rank_offset", 5)), ProtocolError);    // outside the world
  CHECK_THROWS_AS(decode_client_message(with("master_port", 0)), ProtocolError);
  CHECK_THROWS_AS(decode_client_message(with("master_addr", "a b")), ProtocolError);
  CHECK_THROWS_AS(decode_client_message(with("nprocs", "abc")), ProtocolError);      // not 16 digits
  CHECK_THROWS_AS(decode_client_message(with("restart_count", -1)), ProtocolError);
  auto j = nlohmann::json::parse(payload);
  j["resume"] = 7;
  CHECK_THROWS_AS(decode_client_message(j.dump()), ProtocolError);
}

TEST_CASE("an agent's request for the connection's proof, and the proof: round trip, hex only") {
  CHECK(std::get<ProveMsg>(decode_client_message(encode(ClientMessage{ProveMsg{"0a1b"}}))).nonce == "0a1b");
  CHECK(std::get<ProofMsg>(decode_server_message(encode(ServerMessage{ProofMsg{"c0ffee"}}))).proof == "c0ffee");
  CHECK_THROWS_AS(decode_client_message(R"({"type":"prove","nonce":"xyz"})"), ProtocolError);
  CHECK_THROWS_AS(decode_client_message(R"({"type":"prove"})"), ProtocolError);
  CHECK_THROWS_AS(decode_server_message(R"({"type":"proof","proof":7})"), ProtocolError);
  // Over both nonces and the challenge's settings: another agent nonce, server nonce, token, run id or setting
  // gives another proof (issue 55: a relay replayed a challenge with a 24 h heartbeat timeout).
  ChallengeMsg challenge{kProtocolName, kProtocolVersion, "aa", 1000, 15000, false, ""};
  const std::string settings = challenge_settings(challenge);
  const std::string p = compute_connection_proof("tok", "aa", "bb", "run", settings);
  CHECK(verify_connection_proof("tok", "aa", "bb", "run", settings, p));
  CHECK_FALSE(verify_connection_proof("tok", "aa", "bc", "run", settings, p));
  CHECK_FALSE(verify_connection_proof("tok", "ab", "bb", "run", settings, p));
  CHECK_FALSE(verify_connection_proof("tok2", "aa", "bb", "run", settings, p));
  CHECK_FALSE(verify_connection_proof("tok", "aa", "bb", "run2", settings, p));
  for (auto change : std::vector<std::function<void(ChallengeMsg&)>>{
           [](ChallengeMsg& c) { c.heartbeat_timeout_ms = 86'400'000; },
           [](ChallengeMsg& c) { c.heartbeat_interval_ms = 1; }, [](ChallengeMsg& c) { c.munge = true; },
           [](ChallengeMsg& c) { c.resumable = true; }, [](ChallengeMsg& c) { c.meets = false; },
           [](ChallengeMsg& c) { c.version = 1; }}) {
    ChallengeMsg replayed = challenge;
    change(replayed);
    CHECK_FALSE(verify_connection_proof("tok", "aa", "bb", "run", challenge_settings(replayed), p));
  }
  CHECK(p != compute_server_proof("tok", "aa\nbb", "run"));  // not the challenge's proof of a crafted nonce
}

TEST_CASE("a hello carries this agent's seat commitment, a resume claim the secret behind it (issue 33)") {
  const std::string secret = random_hex(32);
  HelloMsg hello;
  hello.run_id = "job1";
  hello.mac = "ab";
  hello.nproc = 1;
  hello.host = "h";
  hello.master_port = 1;
  CHECK(std::get<HelloMsg>(decode_client_message(encode(ClientMessage{hello}))).seat.empty());  // absent: none
  hello.seat = seat_commitment(secret);
  CHECK(hello.seat.size() == 64);
  CHECK(hello.seat != secret);
  Assignment a;
  a.nnodes = 1;
  a.world_size = 1;
  a.nprocs = {1};
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  hello.resume = resume_claim_of(a);
  hello.resume->seat_secret = secret;
  const std::string payload = encode(ClientMessage{hello});
  const auto back = std::get<HelloMsg>(decode_client_message(payload));
  CHECK(back.seat == hello.seat);
  CHECK(back.resume->seat_secret == secret);
  CHECK(seat_secret_matches(back.seat, back.resume->seat_secret));
  CHECK_FALSE(seat_secret_matches(back.seat, random_hex(32)));
  CHECK_FALSE(seat_secret_matches("", ""));  // no commitment: nothing matches it
  auto with = [&](bool in_resume, const char* key, nlohmann::json value) {
    auto j = nlohmann::json::parse(payload);
    (in_resume ? j["resume"] : j)[key] = std::move(value);
    return j.dump();
  };
  for (bool in_resume : {false, true}) {
    const char* key = in_resume ? "seat_secret" : "seat";
    CHECK_THROWS_AS(decode_client_message(with(in_resume, key, "abc")), ProtocolError);  // not 64 digits
    CHECK_THROWS_AS(decode_client_message(with(in_resume, key, std::string(64, 'g'))), ProtocolError);
    CHECK_THROWS_AS(decode_client_message(with(in_resume, key, std::string(66, 'a'))), ProtocolError);
    CHECK_THROWS_AS(decode_client_message(with(in_resume, key, 7)), ProtocolError);
  }
}

TEST_CASE("a hello back between rounds says the last round; a stop may invite a dropped node back") {
  HelloMsg hello;
  hello.run_id = "r";
  hello.mac = "ab";
  hello.nproc = 1;
  hello.host = "h";
  hello.master_port = 1;
  CHECK_FALSE(std::get<HelloMsg>(decode_client_message(encode(ClientMessage{hello}))).after_round);
  hello.after_round = 4;
  const std::string payload = encode(ClientMessage{hello});
  CHECK(std::get<HelloMsg>(decode_client_message(payload)).after_round == 4);
  auto with = [&](nlohmann::json value) {
    auto j = nlohmann::json::parse(payload);
    j["after_round"] = std::move(value);
    return j.dump();
  };
  CHECK_THROWS_AS(decode_client_message(with(-1)), ProtocolError);
  CHECK_THROWS_AS(decode_client_message(with("4")), ProtocolError);
  StopMsg stop{sample_failure(), "dropped", false, false, true};
  CHECK(std::get<StopMsg>(decode_server_message(encode(ServerMessage{stop}))).rejoin);
  stop.rejoin = false;
  CHECK_FALSE(std::get<StopMsg>(decode_server_message(encode(ServerMessage{stop}))).rejoin);
}

TEST_CASE("a challenge says whether its server may be restarted under a running job, and whether it meets") {
  ChallengeMsg challenge;
  challenge.nonce = "00ff";
  challenge.heartbeat_interval_ms = 1000;
  challenge.heartbeat_timeout_ms = 5000;
  CHECK_FALSE(std::get<ChallengeMsg>(decode_server_message(encode(ServerMessage{challenge}))).resumable);
  challenge.resumable = true;
  CHECK(std::get<ChallengeMsg>(decode_server_message(encode(ServerMessage{challenge}))).resumable);
  // round_ready / meet: a server before them has no flag on the wire, which decodes as false.
  CHECK(std::get<ChallengeMsg>(decode_server_message(encode(ServerMessage{challenge}))).meets);
  challenge.meets = false;
  CHECK_FALSE(std::get<ChallengeMsg>(decode_server_message(encode(ServerMessage{challenge}))).meets);
}
// ---- end of resume ----

TEST_CASE("a recorded end keeps the job's notice, and an end recorded before the field reads as none") {
  RecordedEnd end;
  end.complete = true;
  end.noticed = true;
  end.host = "n1";
  std::string problem;
  auto back = decode_recorded_end(encode_recorded_end("run", end), "run", problem);
  REQUIRE(back);
  CHECK(back->noticed);
  CHECK(describe(*back).find("preempted") != std::string::npos);
  auto older = decode_recorded_end(
      R"({"format":"ddprun-job-end/1","run_id":"run","complete":true,"reason":"","host":"n1","time_unix_ms":1})", "run",
      problem);
  REQUIRE(older);
  CHECK_FALSE(older->noticed);
}
