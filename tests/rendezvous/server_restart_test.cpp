// A resumable server restarted under a running job (issue 19), over real sockets in one process: the clients
// reconnect, claim their round, and the new server goes on with it; the other outcomes end the clients.
#include "tests/rendezvous/socket_fixture.hpp"

using namespace ddprun::rendezvous;
using namespace ddprun::rendezvous::testing;

namespace {

JobConfig resumable_job() {
  JobConfig config = test_job(2, false);
  config.resumable = true;
  return config;
}

ClientConfig reconnecting(std::uint16_t port, std::chrono::milliseconds timeout) {
  ClientConfig config = client_config(port, std::nullopt, 1);
  config.join.master_port = 29500;
  config.reconnect_timeout = timeout;
  return config;
}

struct Restart {
  asio::io_context io;
  std::unique_ptr<Server> server;
  std::uint16_t port = 0;
  std::vector<std::unique_ptr<Agent>> agents;

  explicit Restart(std::chrono::milliseconds reconnect_timeout, JobConfig config = resumable_job()) {
    server = std::make_unique<Server>(io, config, quiet_logger());
    server->start("127.0.0.1", 0);
    port = server->port();
    for (int i = 0; i < 2; ++i) agents.push_back(start_agent(io, reconnecting(port, reconnect_timeout)));
    REQUIRE(run_until(io, [&] { return assigned(0) && assigned(1); }));
  }
  bool assigned(int i) const { return !agents[static_cast<std::size_t>(i)]->events.assignments.empty(); }
  Recorder& of(int i) { return agents[static_cast<std::size_t>(i)]->events; }
  void kill_server() {
    server.reset();  // its connections close, as a SIGKILLed server's do
    REQUIRE(run_until(io, [&] { return !of(0).reconnects.empty() && !of(1).reconnects.empty(); }));
  }
  void start_server(JobConfig config = resumable_job()) {
    server = std::make_unique<Server>(io, config, quiet_logger());
    server->start("127.0.0.1", port);
  }
};

}  // namespace

TEST_CASE("clients that lost a resumable server are taken back by its restart and the job completes there") {
  Restart job(3s);
  job.kill_server();
  CHECK(job.of(0).reconnects == std::vector<bool>{false});
  CHECK(job.agents[0]->client->reconnecting());
  job.agents[1]->client->report_node_done();  // held while the server is away, sent after the resume hello
  run_for(job.io, 100ms);
  job.start_server();
  REQUIRE(run_until(job.io, [&] { return job.of(0).reconnects.size() == 2 && job.of(1).reconnects.size() == 2; }));
  CHECK(job.of(0).reconnects == std::vector<bool>{false, true});
  CHECK_FALSE(job.agents[0]->client->reconnecting());
  CHECK(job.server->phase() == Phase::kRunning);
  CHECK(job.server->state().restart_count == 0);
  job.agents[0]->client->report_node_done();
  REQUIRE(run_until(job.io, [&] { return job.of(0).complete && job.of(1).complete; }));
  CHECK(job.of(0).assignments.size() == 1);  // never assigned again
  CHECK_FALSE(job.of(0).error);
}

TEST_CASE("no server within the reconnect timeout: the client ends with kLostServer naming its attempts") {
  Restart job(300ms);
  job.kill_server();
  REQUIRE(run_until(job.io, [&] { return job.of(0).error && job.of(1).error; }));
  CHECK(job.of(0).error->kind == ErrorKind::kLostServer);
  CHECK(job.of(0).error->message.find("no server took this node back within 0.3 s (--rdzv-reconnect-timeout; ") !=
        std::string::npos);
}

TEST_CASE("a server that is not resumable (hosted by an agent) is lost as before, whatever the timeout") {
  JobConfig hosted = resumable_job();
  hosted.resumable = false;
  Restart job(3s, hosted);
  job.server.reset();
  REQUIRE(run_until(job.io, [&] { return job.of(0).error && job.of(1).error; }));
  CHECK(job.of(0).error->kind == ErrorKind::kLostServer);
  CHECK(job.of(0).reconnects.empty());
}

TEST_CASE("a restarted server with other settings refuses the claims: the clients end refused") {
  Restart job(3s);
  job.kill_server();
  JobConfig three = resumable_job();
  three.min_nodes = three.max_nodes = 3;
  job.start_server(three);
  REQUIRE(run_until(job.io, [&] { return job.of(0).error && job.of(1).error; }));
  CHECK(job.of(0).error->kind == ErrorKind::kRefused);
  CHECK(job.of(0).error->message.find("the restarted rendezvous server refused this node's return: cannot take "
                                      "back round 0 (2 nodes") == 0);
}

TEST_CASE("retarget: reconnecting clients told of a server elsewhere go there at once and resume the round") {
  Restart job(5s);
  job.kill_server();
  // A new host at another port (etcd elected another agent): the old port stays closed.
  job.server = std::make_unique<Server>(job.io, resumable_job(), quiet_logger());
  job.server->start("127.0.0.1", 0);
  REQUIRE(job.server->port() != job.port);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& agent : job.agents) agent->client->retarget("127.0.0.1", job.server->port());
  REQUIRE(run_until(job.io, [&] { return job.of(0).reconnects.size() == 2 && job.of(1).reconnects.size() == 2; }));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);  // at once, not after the back-off toward the old port
  CHECK(job.server->phase() == Phase::kRunning);
  for (auto& agent : job.agents) agent->client->report_node_done();
  REQUIRE(run_until(job.io, [&] { return job.of(0).complete && job.of(1).complete; }));
  CHECK_FALSE(job.of(0).error);
}
