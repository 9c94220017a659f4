// What a node tells the rendezvous of its own failures (agent/failure_reports.hpp), with a recording host in
// place of the server: the failure of a worker as its record says, a hang, a stop signal during a round,
// between rounds, before this node was placed, and while the server is away.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <csignal>

#include "agent/failure_reports.hpp"

using namespace ddprun::agent;
namespace rdzv = ddprun::rendezvous;

namespace {

struct Fixture {
  boost::asio::io_context io;
  AgentConfig config;
  World world;
  SupervisionPolicy policy;
  AgentLifecycle lifecycle;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  std::vector<rdzv::Failure> sent;
  std::vector<std::pair<JobCause, std::string>> ended;
  bool away = false, hosting = false;
  std::unique_ptr<FailureReports> reports;

  Fixture() {
    config.host = "gpu7";
    world.node_rank = 1;
    world.rank_offset = 4;
    policy.add_worker(4, 0, 4100, 0);
    policy.add_worker(5, 1, 4101, 0);
    FailureReports::Host h;
    h.send = [this](const rdzv::Failure& f) { sent.push_back(f); };
    h.server_away = [this] { return away; };
    h.hosting = [this] { return hosting; };
    h.end_job = [this](const JobCause& c, const char* why) { ended.emplace_back(c, why); };
    reports = std::make_unique<FailureReports>(io, config, world, policy, lifecycle, log, h);
  }
  void run_for(std::chrono::milliseconds d) {
    io.restart();
    io.run_for(d);
  }
};

}  // namespace

TEST_CASE("a worker's failure as its record says: exit code, error file, reason, where") {
  Fixture f;
  ddprun::process::ExitStatus st;
  st.code = 3;
  f.policy.on_exit(1, st, 1234);
  f.policy.worker(1).error_message = "ValueError: bad batch";
  f.policy.worker(1).reason = "it said so";
  f.reports->worker_failed(1);
  REQUIRE(f.sent.size() == 1);
  const rdzv::Failure& s = f.sent[0];
  CHECK(s.kind == rdzv::FailureKind::kExited);
  CHECK(s.exit_code == 3);
  CHECK(s.rank == 5);
  CHECK(s.local_rank == 1);
  CHECK(s.node_rank == 1);
  CHECK(s.host == "gpu7");
  CHECK(s.pid == 4101);
  CHECK(s.error_file_contents == "ValueError: bad batch");
  CHECK(s.message == "it said so");
}

TEST_CASE("a worker killed by a signal, and one hung") {
  Fixture f;
  ddprun::process::ExitStatus st;
  st.signaled = true;
  st.signal = SIGSEGV;
  f.policy.on_exit(0, st, 1);
  f.reports->worker_failed(0);
  f.reports->worker_hung(1, "hung: no heartbeat for 9.0 s");
  REQUIRE(f.sent.size() == 2);
  CHECK(f.sent[0].kind == rdzv::FailureKind::kSignaled);
  CHECK(f.sent[0].signal == SIGSEGV);
  CHECK(f.sent[1].kind == rdzv::FailureKind::kHung);
  CHECK(f.sent[1].signal == SIGKILL);
  CHECK(f.sent[1].rank == 5);
  CHECK(f.sent[1].message == "hung: no heartbeat for 9.0 s");
}

TEST_CASE("a stop signal while the round runs: a node failure, the stop order awaited from the server") {
  Fixture f;
  f.lifecycle.on_placed();
  f.lifecycle.on_workers_started();
  f.reports->signal_received(SIGTERM);
  REQUIRE(f.sent.size() == 1);
  CHECK(f.sent[0].kind == rdzv::FailureKind::kAgentStopped);
  CHECK(f.sent[0].rank == -1);
  CHECK(f.sent[0].signal == SIGTERM);
  CHECK(f.ended.empty());
  f.run_for(std::chrono::milliseconds(50));
  CHECK(f.ended.empty());  // no timer of its own while a round runs: the teardown ends it
}

TEST_CASE("a stop signal while the server is away: told, and the job ends here without waiting for it") {
  Fixture f;
  f.lifecycle.on_placed();
  f.lifecycle.on_workers_started();
  f.away = true;
  f.reports->signal_received(SIGINT);
  CHECK(f.sent.size() == 1);
  REQUIRE(f.ended.size() == 1);
  CHECK(f.ended[0].first.exit_code == 128 + SIGINT);
  CHECK(f.ended[0].first.text.find("while the rendezvous server was away") != std::string::npos);
}

TEST_CASE("a stop signal before this node was placed: it just leaves (unless it hosts the server)") {
  Fixture f;
  f.reports->signal_received(SIGTERM);
  CHECK(f.sent.empty());
  REQUIRE(f.ended.size() == 1);
  CHECK(f.ended[0].first.text ==
        "ddprun on node 1 (host gpu7) received SIGTERM before the rendezvous completed");
  CHECK(f.ended[0].second == "signal");
  Fixture host;
  host.hosting = true;
  host.reports->signal_received(SIGTERM);
  CHECK(host.sent.size() == 1);  // the others wait on it: they are told
  CHECK(host.ended.empty());
}

TEST_CASE("a stop signal between restart rounds: told, then the end after the reply limit at most") {
  Fixture f;
  f.lifecycle.on_placed();  // placed once, no worker of this round started
  f.reports->left_between_rounds(SIGTERM);
  CHECK(f.sent.size() == 1);
  CHECK(f.ended.empty());
  f.run_for(FailureReports::kStopReplyLimit + std::chrono::milliseconds(200));
  REQUIRE(f.ended.size() == 1);
  CHECK(f.ended[0].first.text.find("between restart rounds") != std::string::npos);
  SUBCASE("no end of its own once the rendezvous said how the job ended, or when cancelled") {
    Fixture g;
    g.lifecycle.on_placed();
    g.reports->left_between_rounds(SIGTERM);
    g.lifecycle.on_job_over();
    g.run_for(FailureReports::kStopReplyLimit + std::chrono::milliseconds(200));
    CHECK(g.ended.empty());
    Fixture c;
    c.lifecycle.on_placed();
    c.reports->left_between_rounds(SIGTERM);
    c.reports->cancel();
    c.run_for(FailureReports::kStopReplyLimit + std::chrono::milliseconds(200));
    CHECK(c.ended.empty());
  }
}
