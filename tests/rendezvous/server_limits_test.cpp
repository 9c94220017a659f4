// What a peer may cost the server: a stranger a few KiB and a bounded number of places, a node that stops
// reading a bounded outbox; and the loud warning when anyone could join.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tests/rendezvous/socket_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {
std::string frame_header(std::uint32_t length) {
  return std::string{static_cast<char>(length >> 24), static_cast<char>(length >> 16), static_cast<char>(length >> 8),
                     static_cast<char>(length)};
}

// A 2-node job that keeps at most 8 connections waiting to join; no connection is closed for a missing hello
// while a test runs (3 s).
JobConfig eight_waiting() {
  JobConfig config = test_job(2, true);
  config.max_pending_connections = 8;
  config.heartbeat_timeout = 3s;
  return config;
}
}  // namespace

TEST_CASE("before its hello a connection may announce only a small frame") {
  asio::io_context io;
  JobConfig config = test_job(2, true);
  config.heartbeat_timeout = 3s;  // the hello deadline, far from the immediate close checked here
  Server server(io, config, quiet_logger());
  server.start("127.0.0.1", 0);
  RawPeer small(io, server.port());
  small.send_bytes(frame_header(kHandshakeMaxFrameBytes) + std::string(100, ' '));
  RawPeer big(io, server.port());
  big.send_bytes(frame_header(kHandshakeMaxFrameBytes + 1));  // far below the 1 MiB a node may send
  auto started = std::chrono::steady_clock::now();
  CHECK(big.wait_closed(1000ms));
  CHECK(std::chrono::steady_clock::now() - started < 1500ms);  // at once, not at the 3 s hello deadline
  CHECK(small.read_frame());                                    // the challenge: still open
}

TEST_CASE("after its hello is accepted a node may send frames up to the full limit") {
  asio::io_context io;
  Server server(io, test_job(2, true), quiet_logger());
  server.start("127.0.0.1", 0);
  auto node0 = start_agent(io, client_config(server.port(), 0, 1));
  RawPeer node1(io, server.port());
  node1.handshake(1, 1);
  REQUIRE(run_until(io, [&] { return !node0->events.assignments.empty(); }));
  Failure f;
  f.rank = 1;  // node 1's only worker: rank offset 1, local rank 0
  f.local_rank = 0;
  f.exit_code = 7;
  f.error_file_contents = std::string(60 * 1024, 'e');  // a 60 KiB error file: over the handshake limit
  node1.send(FailureMsg{f});
  REQUIRE(run_until(io, [&] { return !node0->events.stops.empty(); }));
  CHECK(node0->events.stops[0].root_cause.exit_code == 7);
  CHECK(node0->events.stops[0].root_cause.error_file_contents.size() == 60 * 1024);
}

TEST_CASE("beyond the connection limit the oldest stranger is closed, and a real node still joins") {
  asio::io_context io;
  Server server(io, eight_waiting(), quiet_logger());
  server.start("127.0.0.1", 0);
  auto node0 = start_agent(io, client_config(server.port(), 0, 1));
  REQUIRE(run_until(io, [&] { return server.state().nodes.size() == 1; }));
  std::vector<std::unique_ptr<RawPeer>> strangers;
  for (int i = 0; i < 20; ++i) {
    strangers.push_back(std::make_unique<RawPeer>(io, server.port()));
    strangers.back()->send_bytes(frame_header(1000) + "{");  // a hello that never finishes
  }
  run_for(io, 300ms);                         // every connect accepted (the count passes 9 on the way up)
  CHECK(server.connection_count() == 1 + 8);  // node 0 and 8 strangers; the limit never counts nodes
  for (int i = 0; i < 12; ++i) CHECK(strangers[static_cast<std::size_t>(i)]->wait_closed(1000ms));
  CHECK(strangers.back()->read_frame());  // the newest are the ones kept
  auto node1 = start_agent(io, client_config(server.port(), 1, 1));
  CHECK(run_until(io, [&] { return !node0->events.assignments.empty() && !node1->events.assignments.empty(); }));
  CHECK_FALSE(node0->events.error);
}

// Issue 55: strangers holding idle connections had the server evict agents in mid-handshake, and the job failed.
TEST_CASE("at the connection limit strangers go before a connection that asked for the server's proof") {
  asio::io_context io;
  Server server(io, eight_waiting(), quiet_logger());
  server.start("127.0.0.1", 0);
  RawPeer under_way(io, server.port());  // the oldest: an agent that has begun its handshake
  REQUIRE(under_way.read_frame());       // the challenge
  under_way.send(ProveMsg{"0123456789abcdef0123456789abcdef"});
  REQUIRE(under_way.read_frame());       // the server's proof
  std::vector<std::unique_ptr<RawPeer>> strangers;
  for (int i = 0; i < 20; ++i) {
    strangers.push_back(std::make_unique<RawPeer>(io, server.port()));
    if (i % 2) strangers.back()->send_bytes(frame_header(1000) + "{");  // idle, or a frame that never ends
  }
  run_for(io, 300ms);
  CHECK(server.connection_count() == 8);
  for (int i = 0; i < 13; ++i) CHECK(strangers[static_cast<std::size_t>(i)]->wait_closed(1000ms));
  for (int i = 13; i < 20; ++i) CHECK(strangers[static_cast<std::size_t>(i)]->read_frame());  // the 7 newest kept
  CHECK(server.connection_count() == 8);  // ... and the oldest, which asked for the proof
}

TEST_CASE("a node that never reads is closed once its outbox is full, and counts as lost") {
  asio::io_context io;
  JobConfig config = test_job(2, true);
  config.max_frame_bytes = 16 * 1024;
  config.max_outbox_bytes = 64 * 1024;
  Server server(io, config, quiet_logger());
  server.start("127.0.0.1", 0);
  auto node0 = start_agent(io, client_config(server.port(), 0, 1));
  RawPeer deaf(io, server.port(), /*receive_buffer=*/4096);
  deaf.handshake(1, 1);
  REQUIRE(run_until(io, [&] { return !node0->events.assignments.empty(); }));
  // Heartbeats as fast as the socket takes them; every one is answered, and none of the answers is read.
  const auto burst = [&deaf] {  // each frame sealed in turn: a repeated one would fail its sequence
    std::string frames;
    for (int i = 0; i < 2000; ++i) frames += deaf.frame(HeartbeatMsg{});
    return frames;
  };
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (node0->events.stops.empty() && std::chrono::steady_clock::now() < deadline && deaf.send_async(burst(), io)) {
  }
  REQUIRE_FALSE(node0->events.stops.empty());
  const Failure& cause = node0->events.stops[0].root_cause;
  CHECK(cause.node_rank == 1);
  CHECK(cause.message.find("the peer does not read: over 64 KiB unsent") != std::string::npos);
}

namespace {
// The server's log at info level, for a job with `token`, listening on `address`.
std::string startup_log(const std::string& token, const std::string& address) {
  std::string path = "/tmp/ddprun_rdzv_log_test_" + std::to_string(::getpid());
  {
    std::FILE* file = std::fopen(path.c_str(), "w");
    REQUIRE(file);
    asio::io_context io;
    JobConfig config = test_job(2, true);
    config.token = token;
    Server server(io, config, ddprun::Logger(ddprun::LogLevel::kInfo, "test", "", ::fileno(file)));
    server.start(address, 0);  // listens only: nothing connects, nothing is sent
    server.stop();
    std::fclose(file);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return text.str();
}
}  // namespace

TEST_CASE("listening beyond loopback without a secret token warns what a stranger can do and how to fix it") {
  const std::string log = startup_log(run_id_token("job42"), "0.0.0.0");
  CHECK(log.find("WARNING") != std::string::npos);
  CHECK(log.find("without a secret token") != std::string::npos);
  CHECK(log.find("become node 0, which sets every worker's MASTER_ADDR and MASTER_PORT") != std::string::npos);
  CHECK(log.find("stops the job with any root cause") != std::string::npos);
  CHECK(log.find("--rdzv-token-file FILE or DDPRUN_TOKEN") != std::string::npos);
  CHECK(startup_log(run_id_token("job42"), "127.0.0.1").find("without a secret token") == std::string::npos);
  CHECK(startup_log("s3cret", "0.0.0.0").find("without a secret token") == std::string::npos);
}
