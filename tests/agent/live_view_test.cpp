// The node's live view as a component (agent/live_view.hpp), driven through its callbacks with no process:
// worker records in a real SupervisionPolicy (pids that do not exist: no /proc numbers), beats written into a
// real heartbeat page, the agent's part played by a recording host. The socket and the textfile are left to
// the integration tests (test_live_view.py).
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "agent/live_view.hpp"
#include "agent/loop_probe.hpp"

using namespace ddprun::agent;
namespace rdzv = ddprun::rendezvous;
using nlohmann::json;

namespace {

constexpr pid_t kNoSuchPid = 0x3ffffff0;  // above pid_max: never a process

struct Fixture {
  boost::asio::io_context io;
  AgentConfig config;
  World world;
  HeartbeatChannel beats{2};
  SupervisionPolicy policy;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  EventLog events;
  bool placed = true, finished = false;
  std::set<int> hung;
  int view_requests = 0;
  std::vector<std::pair<int, std::string>> stopped;
  std::unique_ptr<LiveView> view;
  unsigned char* page = nullptr;

  Fixture() {
    world.node_rank = 1;
    world.nnodes = 2;
    world.local_world_size = 2;
    world.rank_offset = 2;
    world.world_size = 4;
    policy.add_worker(2, 0, kNoSuchPid, 0);
    policy.add_worker(3, 1, kNoSuchPid + 1, 0);
    LiveView::Host host;
    host.agent_state = [] { return std::string("running"); };
    host.placed_once = [this] { return placed; };
    host.finished = [this] { return finished; };
    host.found_hung = [this](int lr) { return hung.count(lr) > 0; };
    host.report_status = [](std::string, std::vector<rdzv::RankPace>) {};
    host.request_view = [this] { ++view_requests; };
    host.stop_straggler = [this](int lr, const std::string& why) { stopped.emplace_back(lr, why); };
    view = std::make_unique<LiveView>(io, config, world, beats, policy, log, events, std::move(host));
    page = static_cast<unsigned char*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, beats.fd(), 0));
    REQUIRE(page != MAP_FAILED);
  }
  ~Fixture() { ::munmap(page, 4096); }
  void beat(int lr, std::int64_t step) {
    HeartbeatChannel::write(page + HeartbeatChannel::offset_of(lr), step, monotonic_ns());
  }
  // The worker's own work, `work_ms` a step, over `steps` steps, sampled as the live view's tick does (in real
  // time: a worker's work cannot exceed the time that passed).
  void work_steps(int lr, int steps, std::int64_t work_ms) {
    unsigned char* slot = page + HeartbeatChannel::offset_of(lr);
    for (int step = 1; step <= steps; ++step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(work_ms));
      HeartbeatChannel::add_work(slot, work_ms * 1'000'000);
      HeartbeatChannel::write(slot, step, monotonic_ns());
      view->sample(/*remember=*/true);
    }
  }
  // Named by its own work per step: 30 ms against the others' 10 ms.
  static rdzv::Straggler straggler(int rank, int node_rank) {
    rdzv::Straggler s;
    s.rank = rank;
    s.node_rank = node_rank;
    s.host = "n" + std::to_string(node_rank);
    s.pace_us = 30'000;
    s.median_us = 10'000;
    s.work = true;
    return s;
  }
};

}  // namespace

TEST_CASE("a rank's state: running once it beats, starting before under --hang-timeout, hung as the inquiry says") {
  Fixture f;
  f.config.hang_timeout = std::chrono::seconds(5);
  f.beat(0, 7);
  NodeStatus s = f.view->sample(/*remember=*/true);
  REQUIRE(s.ranks.size() == 2);
  CHECK(s.node_rank == 1);
  CHECK(s.state == "running");
  CHECK(s.ranks[0].state == "running");
  CHECK(s.ranks[0].step == 7);
  CHECK(s.ranks[0].beat_age_s.has_value());
  CHECK(s.ranks[1].state == "starting");  // no beat yet, and the user said the workers beat
  CHECK_FALSE(s.ranks[1].rss_bytes.has_value());  // no such process: blank, not zero
  f.hung.insert(0);
  CHECK(f.view->sample(false).ranks[0].state == "hung");
  f.config.hang_timeout = std::chrono::milliseconds(0);
  CHECK(f.view->sample(false).ranks[1].state == "running");  // a program that never beats runs from its start
}

TEST_CASE("ranks that ended say how, and a round in teardown is stopping") {
  Fixture f;
  f.policy.on_exit(1, ddprun::process::ExitStatus{false, 3, 0, false}, 10);  // the first failure: teardown begins
  NodeStatus s = f.view->sample(false);
  CHECK(s.ranks[1].state == "failed");
  CHECK(s.ranks[0].state == "stopping");
  CHECK(f.view->running_paces().empty());  // a stopping round's paces describe no one
}

TEST_CASE("stragglers: named once each way, marked in the view, and --straggler-action stop picks this node's rank") {
  Fixture f;
  f.config.straggler_stop = true;
  f.work_steps(1, 4, 30);  // this node measures local rank 1 (rank 3) at 30 ms of work a step too
  rdzv::StragglersMsg m;
  m.named = {Fixture::straggler(3, 1), Fixture::straggler(0, 0)};  // one here (local rank 1), one elsewhere
  f.view->on_stragglers(m);
  CHECK(f.view->named_slow(3));
  CHECK(f.view->named_slow(0));
  REQUIRE(f.stopped.size() == 1);
  CHECK(f.stopped[0].first == 1);
  CHECK(f.stopped[0].second.rfind("stopped by --straggler-action stop: ", 0) == 0);
  f.view->on_stragglers(m);  // named again: not stopped twice
  CHECK(f.stopped.size() == 1);
  f.beat(1, 1);
  CHECK(f.view->sample(false).ranks[1].state == "slow");
  f.view->on_new_round();
  CHECK_FALSE(f.view->named_slow(3));
}

// Issue 33: an insider's paces could get an honest, balanced rank named; its node killed it on the word alone.
TEST_CASE("--straggler-action stop acts only on what this node's own measurement of the rank supports") {
  Fixture f;
  f.config.straggler_stop = true;
  rdzv::StragglersMsg m;
  m.named = {Fixture::straggler(3, 1)};
  SUBCASE("no pace measured here") {
    f.view->on_stragglers(m);
    CHECK(f.stopped.empty());
    CHECK(f.view->named_slow(3));  // still shown as named: the rendezvous said so
  }
  SUBCASE("measured here at the others' median: the judgement is not borne out") {
    f.work_steps(1, 4, 10);
    f.view->on_stragglers(m);
    CHECK(f.stopped.empty());
  }
  SUBCASE("measured inside the margin a name goes by (+10% < +15%)") {
    f.work_steps(1, 4, 11);
    f.view->on_stragglers(m);
    CHECK(f.stopped.empty());
  }
  SUBCASE("measured past it: stopped") {
    f.work_steps(1, 4, 13);
    f.view->on_stragglers(m);
    CHECK(f.stopped.size() == 1);
  }
}

TEST_CASE("a straggler is not stopped without --straggler-action stop, nor once its rank ended") {
  Fixture f;
  rdzv::StragglersMsg m;
  m.named = {Fixture::straggler(2, 1)};
  f.view->on_stragglers(m);
  CHECK(f.stopped.empty());
  Fixture g;
  g.config.straggler_stop = true;
  g.policy.on_exit(0, ddprun::process::ExitStatus{false, 0, 0, false}, 10);
  g.view->on_stragglers(m);
  CHECK(g.stopped.empty());
}

TEST_CASE("ddprun-status: one request to the rendezvous for all waiting, answered with the other nodes") {
  Fixture f;
  std::vector<std::string> answers;
  auto reply = [&answers](const std::string& doc) { answers.push_back(doc); };
  f.view->on_request(reply);
  f.view->on_request(reply);
  CHECK(f.view_requests == 1);
  CHECK(answers.empty());
  rdzv::JobViewMsg other;
  other.nodes = {json{{"node_rank", 0}, {"host", "n0"},
                      {"ranks", json::array({json{{"rank", 0}, {"beat_age_s", 0.25}}, json{{"rank", 1}}})}}
                     .dump(),
                 json{{"node_rank", 1}, {"host", "stale"}}.dump(), "not json"};
  other.ages_ms = {1500, 1500, 1500};
  f.view->on_job_view(other);
  REQUIRE(answers.size() == 2);
  const json doc = json::parse(answers[0]);
  REQUIRE(doc["nodes"].size() == 2);  // this node fresh, then node 0; our stale copy and the garbage are dropped
  CHECK(doc["nodes"][0]["node_rank"] == 1);
  CHECK(doc["nodes"][0]["age_ms"] == 0);
  CHECK(doc["nodes"][1]["host"] == "n0");
  CHECK(doc["nodes"][1]["age_ms"] == 1500);
  // Its rank's last beat is as old as its report, and more (issue 56): never younger than the node's figures.
  CHECK(doc["nodes"][1]["ranks"][0]["beat_age_s"].get<double>() == doctest::Approx(1.75));
  CHECK_FALSE(doc["nodes"][1]["ranks"][1].contains("beat_age_s"));  // none said: none made up
  CHECK(doc["complete"] == true);
}

TEST_CASE("ddprun-status: a node not yet placed, or alone, answers at once with itself") {
  Fixture f;
  f.placed = false;
  std::string answer;
  f.view->on_request([&answer](const std::string& doc) { answer = doc; });
  CHECK(f.view_requests == 0);
  const json doc = json::parse(answer);
  CHECK(doc["nodes"].size() == 1);
  CHECK(doc["complete"] == false);  // two nodes, one known
}

TEST_CASE("the loop probe keeps the longest lateness, the CPU time of its period, and the longest stretch of work") {
  boost::asio::io_context io;
  LoopProbe p(io);
  CHECK_FALSE(p.running());
  p.record(std::chrono::milliseconds(2), 1'000'000);       // first tick: no period before it
  p.record(std::chrono::milliseconds(50), 4'000'000);      // 3 ms of CPU in a period 50 ms late: it waited
  p.record(std::chrono::milliseconds(10), 12'000'000);     // 8 ms of work, late less
  const std::string r = p.report();
  CHECK(r.find("longest lateness 50000 us (the loop thread's CPU time in that period: 3000 us)") != std::string::npos);
  CHECK(r.find("longest stretch of loop work: 8000 us") != std::string::npos);
}
