// Re-forming in place as a component (agent/in_place_reform.hpp), driven through its callbacks with no process:
// the workers' side of the heartbeat page (offers, what they took up) written here, the agent's part played by
// a recording host, the lifecycle and policy real.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <boost/asio/io_context.hpp>
#include <cstring>

#include "agent/in_place_reform.hpp"
#include "common/contract/worker_contract.hpp"
#include "common/process/process_tree.hpp"
#include "temp_dir.hpp"

using namespace ddprun::agent;
namespace rdzv = ddprun::rendezvous;

namespace {

struct Fixture {
  TempDir tmp;
  boost::asio::io_context io;
  AgentConfig config;
  World world;
  HeartbeatChannel beats{2};
  SupervisionPolicy policy;
  AgentLifecycle lifecycle;
  RunLayout layout = RunLayout::create(tmp.path, "reform");
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  EventLog events;
  std::vector<std::string> said;  // what the host was asked, in order
  std::vector<std::vector<int>> judged;
  std::unique_ptr<InPlaceReform> reform;
  unsigned char* page = nullptr;
  bool server_meets = true;  // the rendezvous takes round_ready
  bool inquiring = false;    // a hang inquiry is under way

  Fixture() {
    config.term_timeout = std::chrono::milliseconds(20);
    world.local_world_size = 2;
    world.rank_offset = 0;
    world.world_size = 4;
    layout.prepare_attempt(0, 2);
    policy.add_worker(0, 0, 4000, 0);
    policy.add_worker(1, 1, 4001, 0);
    lifecycle.on_placed();
    lifecycle.on_workers_started();
    InPlaceReform::Host h;
    h.attempt = [] { return 0; };
    h.hang_inquiring = [this] { return inquiring; };
    h.pause_hang_watch = [this] { said.push_back("pause"); };
    h.resume_hang_watch = [this] { said.push_back("resume"); };
    h.judge_hung = [this](const std::vector<int>& lrs) { judged.push_back(lrs); };
    h.note_reform = [this](const rdzv::StopOrder&) { said.push_back("note"); };
    h.report_stopped = [this] { said.push_back("stopped"); };
    h.report_worker_failure = [this](int lr) { said.push_back("failure " + std::to_string(lr)); };
    h.rank_changed = [this](int lr, int rank) { said.push_back("rank " + std::to_string(lr) + "=" + std::to_string(rank)); };
    h.replace_workers = [this] { said.push_back("replace"); };
    h.report_round_ready = [this](int round) {
      said.push_back("ready " + std::to_string(round));
      return server_meets;
    };
    reform = std::make_unique<InPlaceReform>(io, config, world, beats, policy, lifecycle, layout, log, events, h);
    reform->on_workers_started();
    page = static_cast<unsigned char*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, beats.fd(), 0));
    REQUIRE(page != MAP_FAILED);
  }
  ~Fixture() {
    ::munmap(page, 4096);
    layout.cleanup();
  }
  // What a worker's helper writes: it offers (1) or took n re-forms up (1 + n).
  void took(int lr, std::int64_t value) {
    std::memcpy(page + HeartbeatChannel::offset_of(lr) + ddprun::contract::kBeatReformsTakenOffset, &value, 8);
  }
  void all_offer() {
    took(0, 1);
    took(1, 1);
  }
  std::int64_t field(int lr, std::size_t offset) const {
    std::int64_t v = 0;
    std::memcpy(&v, page + HeartbeatChannel::offset_of(lr) + offset, 8);
    return v;
  }
  std::int64_t announced_to(int lr) const { return field(lr, ddprun::contract::kBeatReformsAnnouncedOffset); }
  std::int64_t group_lost_for(int lr) const { return field(lr, ddprun::contract::kBeatGroupLostOffset); }
  static rdzv::StopOrder joined() {
    rdzv::StopOrder o;
    o.restarting = true;
    o.membership = true;
    o.reason = "node 2 joined";
    return o;
  }
  static rdzv::StopOrder node_lost() {
    rdzv::StopOrder o;
    o.restarting = true;
    o.root_cause.kind = rdzv::FailureKind::kNodeLost;
    o.root_cause.rank = -1;
    o.reason = "node 1 lost";
    return o;
  }
  void run_for(std::chrono::milliseconds d) {
    io.restart();
    io.run_for(d);
  }
};

}  // namespace

TEST_CASE("workers that did not offer: the re-form goes the usual way") {
  Fixture f;
  f.took(0, 1);  // only one of the two offers
  CHECK_FALSE(f.reform->take(Fixture::joined()));
  CHECK(f.said.empty());
  CHECK(f.lifecycle.stage() == AgentLifecycle::Stage::kRunning);
}

TEST_CASE("a worker's failure is never re-formed in place, even when every worker offers") {
  Fixture f;
  f.all_offer();
  rdzv::StopOrder o = Fixture::joined();
  o.membership = false;
  o.root_cause.kind = rdzv::FailureKind::kExited;
  o.root_cause.rank = 1;
  CHECK_FALSE(f.reform->take(o));
  CHECK(f.said.empty());
}

TEST_CASE("a join, every worker offering: the node reports itself stopped, the workers stay") {
  Fixture f;
  f.all_offer();
  CHECK(f.reform->take(Fixture::joined()));
  // They train on in the old round until the hand-over: the hang watch goes on watching them.
  CHECK(f.said == std::vector<std::string>{"note", "stopped"});
  CHECK(f.lifecycle.reforming());
  CHECK(f.lifecycle.awaits_reform());
  CHECK(f.group_lost_for(0) == 0);  // a join leaves the group whole: nobody is told to leave it
  CHECK(f.group_lost_for(1) == 0);
}

TEST_CASE("a lost node: the workers are told to leave the group at once, again if it changes again") {
  Fixture f;
  f.all_offer();
  CHECK(f.reform->take(Fixture::node_lost()));
  CHECK(f.lifecycle.reforming());
  CHECK(f.group_lost_for(0) == 1);  // the group of the round before re-form 1 lost a node
  CHECK(f.group_lost_for(1) == 1);
  CHECK(f.announced_to(0) == 0);  // the round itself is not handed over yet
  f.said.clear();
  CHECK(f.reform->take(Fixture::node_lost()));  // changed again while forming: still in place, no second report
  CHECK(f.said == std::vector<std::string>{"pause"});  // told to leave again: silent until the round, unwatched
}

TEST_CASE("the assignment goes to the running workers: a whole file each, then the announcement, new ranks") {
  Fixture f;
  f.all_offer();
  REQUIRE(f.reform->take(Fixture::joined()));
  f.world.rank_offset = 2;
  f.world.world_size = 6;
  f.said.clear();
  f.reform->on_assignment();
  // Held until every node's workers can meet: this node's are ready at once, the announcement waits for meet.
  CHECK(f.lifecycle.stage() == AgentLifecycle::Stage::kRunning);
  CHECK(f.said == std::vector<std::string>{"ready 0"});
  CHECK(f.reform->announced() == 0);
  CHECK(f.announced_to(0) == 0);
  f.reform->on_meet(1);  // another round's: not this one
  CHECK(f.reform->announced() == 0);
  f.reform->on_meet(0);
  f.said.erase(f.said.begin());
  CHECK(f.reform->announced() == 1);
  CHECK(f.announced_to(0) == 1);
  CHECK(f.announced_to(1) == 1);
  CHECK(f.policy.worker(0).rank == 2);
  CHECK(f.policy.worker(1).rank == 3);
  CHECK(f.said == std::vector<std::string>{"rank 0=2", "rank 1=3", "resume"});
  const std::string text = ddprun::process::read_file(f.layout.reform_file(0, 1));
  CHECK(text.find("RANK=3\n") != std::string::npos);
  CHECK(text.find("WORLD_SIZE=6\n") != std::string::npos);
  SUBCASE("taken up in time: nothing more happens at the deadline") {
    f.took(0, 2);
    f.took(1, 2);
    f.run_for(std::chrono::milliseconds(100));
    CHECK(f.said.size() == 3);
    CHECK(f.judged.empty());
  }
  SUBCASE("one worker late, no --hang-timeout: this node's workers are replaced in the same round") {
    f.took(0, 2);
    f.run_for(std::chrono::milliseconds(100));
    CHECK(f.said.back() == "replace");
    CHECK(f.lifecycle.ending() == AgentLifecycle::Ending::kRestartInRound);
  }
  SUBCASE("one worker late under --hang-timeout: it is judged as hung, job-wide") {
    f.config.hang_timeout = std::chrono::seconds(5);
    f.took(1, 2);
    f.run_for(std::chrono::milliseconds(100));
    REQUIRE(f.judged.size() == 1);
    CHECK(f.judged[0] == std::vector<int>{0});
    CHECK(f.said.back() != "replace");
  }
  SUBCASE("a teardown cancels the deadline") {
    f.reform->cancel();
    f.run_for(std::chrono::milliseconds(100));
    CHECK(f.said.size() == 3);
  }
}

TEST_CASE("a worker that died while the round formed: its failure goes in the new round, under its new rank") {
  Fixture f;
  f.all_offer();
  REQUIRE(f.reform->take(Fixture::joined()));
  ddprun::process::ExitStatus died;
  died.code = 3;
  f.policy.on_exit(1, died, 10);
  f.world.rank_offset = 2;
  f.said.clear();
  f.reform->on_assignment();
  CHECK(f.said == std::vector<std::string>{"failure 1"});
  CHECK(f.policy.worker(1).rank == 3);
  CHECK(f.reform->announced() == 0);
}

TEST_CASE("new workers: round_ready once each is past its imports (+56) or has beaten, and only once") {
  Fixture f;
  auto set = [&](int lr, std::size_t offset, std::int64_t v) {
    std::memcpy(f.page + HeartbeatChannel::offset_of(lr) + offset, &v, 8);
  };
  f.run_for(std::chrono::milliseconds(50));
  CHECK(f.said.empty());
  set(0, ddprun::contract::kBeatReadyToMeetOffset, 1);
  f.run_for(std::chrono::milliseconds(50));
  CHECK(f.said.empty());  // one of two
  set(1, ddprun::contract::kBeatTimeOffset, 123);  // beat without the helper's word: ready as well
  f.run_for(std::chrono::milliseconds(50));
  CHECK(f.said == std::vector<std::string>{"ready 0"});
  f.run_for(std::chrono::milliseconds(50));
  CHECK(f.said.size() == 1);
  SUBCASE("workers that never say so are ready at the bound, and the watch ends there") {
    set(0, ddprun::contract::kBeatReadyToMeetOffset, 0);
    set(1, ddprun::contract::kBeatTimeOffset, 0);
    f.reform->set_meet_wait(std::chrono::milliseconds(40));
    f.reform->on_workers_started();
    f.run_for(std::chrono::milliseconds(20));
    CHECK(f.said.size() == 1);
    f.run_for(std::chrono::milliseconds(100));
    CHECK(f.said == std::vector<std::string>{"ready 0", "ready 0"});
    CHECK(f.io.stopped());  // nothing pending: the poll is over
  }
  SUBCASE("a teardown stops the watch of the next workers' start") {
    set(0, ddprun::contract::kBeatReadyToMeetOffset, 0);  // new workers: the agent cleared their slots
    set(1, ddprun::contract::kBeatTimeOffset, 0);
    f.reform->on_workers_started();
    f.reform->cancel();
    set(0, ddprun::contract::kBeatReadyToMeetOffset, 1);
    f.run_for(std::chrono::milliseconds(50));
    CHECK(f.said.size() == 1);
  }
}

TEST_CASE("a held round is handed over at the bound when meet never comes, and dropped when overtaken") {
  Fixture f;
  f.all_offer();
  f.reform->set_meet_wait(std::chrono::milliseconds(30));
  REQUIRE(f.reform->take(Fixture::joined()));
  SUBCASE("no meet: handed over after the bound") {
    f.reform->on_assignment();
    CHECK(f.reform->announced() == 0);
    f.run_for(std::chrono::milliseconds(15));
    CHECK(f.reform->announced() == 0);
    f.run_for(std::chrono::milliseconds(100));
    CHECK(f.reform->announced() == 1);
    CHECK(f.announced_to(1) == 1);
  }
  SUBCASE("a rendezvous that takes no round_ready: handed over at once") {
    f.server_meets = false;
    f.reform->on_assignment();
    CHECK(f.reform->announced() == 1);
  }
  SUBCASE("a node lost while held: the held round is dropped, the next one goes to the same workers") {
    f.reform->on_assignment();
    f.said.clear();
    CHECK(f.reform->take(Fixture::node_lost()));  // the workers never saw round 0: they still offer
    CHECK(f.said == std::vector<std::string>{"note", "pause", "stopped"});
    CHECK(f.group_lost_for(0) == 1);
    f.reform->on_meet(0);
    f.run_for(std::chrono::milliseconds(100));  // neither meet nor the bound of the dropped round hands it over
    CHECK(f.reform->announced() == 0);
    f.world.restart_count = 1;
    f.world.world_size = 2;
    f.reform->on_assignment();
    f.reform->on_meet(1);
    CHECK(f.reform->announced() == 1);
    CHECK(f.announced_to(0) == 1);
    const std::string text = ddprun::process::read_file(f.layout.reform_file(0, 0));
    CHECK(text.find("WORLD_SIZE=2\n") != std::string::npos);
  }
}

TEST_CASE("a held round's hand-over waits while a hang found meanwhile is judged") {
  Fixture f;
  f.all_offer();
  REQUIRE(f.reform->take(Fixture::joined()));
  f.reform->on_assignment();
  f.inquiring = true;  // the workers trained on in round 0 while it was held, and one went silent
  f.reform->on_meet(0);
  f.run_for(std::chrono::milliseconds(250));
  CHECK(f.reform->announced() == 0);  // the verdict ends or restarts the round; nothing is handed over meanwhile
  SUBCASE("the inquiry ends without a verdict (the rank beat again): handed over then") {
    f.inquiring = false;
    f.run_for(std::chrono::milliseconds(250));
    CHECK(f.reform->announced() == 1);
    CHECK(f.announced_to(0) == 1);
  }
  SUBCASE("the verdict ends the round: cancelled, never handed over") {
    f.reform->cancel();
    f.inquiring = false;
    f.run_for(std::chrono::milliseconds(250));
    CHECK(f.reform->announced() == 0);
  }
}
