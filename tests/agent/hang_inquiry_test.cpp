// The node's hang inquiry as a component (agent/hang_inquiry.hpp), driven through its callbacks with no
// process: beats written into a real heartbeat page, the agent's part played by a recording host. Paths that
// would capture stacks (a worker found hung by the watch) are left to the integration tests.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <boost/asio/io_context.hpp>
#include <csignal>

#include "agent/hang_inquiry.hpp"
#include "agent/heartbeat_channel.hpp"
#include "rendezvous/hang_verdict.hpp"

using namespace ddprun::agent;
namespace rdzv = ddprun::rendezvous;

namespace {

constexpr std::int64_t kSec = 1'000'000'000;

struct Fixture {
  boost::asio::io_context io;
  AgentConfig config;
  HeartbeatChannel beats{2};
  RunLayout layout;
  SupervisionPolicy policy;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  EventLog events;
  std::vector<std::vector<int>> killed;
  std::vector<rdzv::HangViewMsg> views;
  bool runs = true;
  std::unique_ptr<HangInquiry> inquiry;
  unsigned char* page = nullptr;

  Fixture() {
    config.hang_timeout = std::chrono::seconds(2);
    policy.add_worker(4, 0, 4000, 0);
    policy.add_worker(5, 1, 4001, 0);
    HangInquiry::Host host;
    host.round_runs = [this] { return runs; };
    host.outcome_known = [] { return false; };
    host.node_rank = [] { return 2; };
    host.attempt = [] { return 0; };
    host.named_slow = [](int) { return false; };
    host.send_view = [this](const rdzv::HangViewMsg& v) { views.push_back(v); };
    host.kill_hung = [this](const std::vector<int>& lrs) {
      killed.push_back(lrs);
      return true;
    };
    host.report_hang = [](int, const std::string&) {};
    inquiry = std::make_unique<HangInquiry>(io, config, beats, layout, policy, log, events, std::move(host));
    page = static_cast<unsigned char*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, beats.fd(), 0));
    REQUIRE(page != MAP_FAILED);
  }
  ~Fixture() { ::munmap(page, 4096); }
  void beat(int lr, std::int64_t step, std::int64_t t) { HeartbeatChannel::write(page + HeartbeatChannel::offset_of(lr), step, t); }
  void quiet(int lr, std::int64_t until) { HeartbeatChannel::write_quiet(page + HeartbeatChannel::offset_of(lr), until); }
};

rdzv::Failure hang_of(int node_rank, int local_rank, std::int64_t pid) {
  rdzv::Failure f;
  f.node_rank = node_rank;
  f.rank = 10 + local_rank;
  f.local_rank = local_rank;
  f.pid = pid;
  f.kind = rdzv::FailureKind::kHung;
  f.signal = SIGKILL;
  f.message = "hung: no heartbeat for 3.0 s";
  return f;
}

}  // namespace

TEST_CASE("silent since: the real last beat, or the round's start for a worker that never beat") {
  Fixture f;
  const std::int64_t before = monotonic_ns();
  f.inquiry->start_round();
  CHECK(f.inquiry->silent_since_ns(1) >= before);  // never beat
  f.beat(0, 7, 5 * kSec);
  CHECK(f.inquiry->silent_since_ns(0) == 5 * kSec);
  f.inquiry->on_job_resumed();  // a pause moves when a worker is judged, never its last beat
  CHECK(f.inquiry->silent_since_ns(0) == 5 * kSec);
}

TEST_CASE("a verdict naming a rank of this node kills that worker, and only when it is the same process") {
  Fixture f;
  f.inquiry->on_stop_order(hang_of(2, 1, 4001));
  REQUIRE(f.killed.size() == 1);
  CHECK(f.killed[0] == std::vector<int>{1});
  f.inquiry->on_stop_order(hang_of(2, 1, 9999));  // another process by now (a restart): not killed as hung
  f.inquiry->on_stop_order(hang_of(3, 1, 4001));  // another node's rank
  rdzv::Failure exited = hang_of(2, 1, 4001);
  exited.kind = rdzv::FailureKind::kExited;  // not a hang, whatever its words
  exited.signal.reset();
  exited.exit_code = 1;
  f.inquiry->on_stop_order(exited);
  f.runs = false;  // the round does not run any more
  f.inquiry->on_stop_order(hang_of(2, 1, 4001));
  CHECK(f.killed.size() == 1);
}

// Issue 33: one insider's hang view could get another node's healthy rank named, and that node SIGKILLed a rank
// that beat 0.0 s ago. A node carries out a verdict on its own rank only when its own measurement supports it:
// silent for half of its --hang-timeout (at least rdzv::kMinConfirmedSilenceMs), or 10 s without one.
TEST_CASE("a verdict naming a rank that beat just now here is not carried out: this node's beats decide") {
  Fixture f;
  f.beat(1, 9, monotonic_ns());  // alive: it beat this instant
  f.inquiry->on_stop_order(hang_of(2, 1, 4001));
  CHECK(f.killed.empty());
  f.beat(1, 9, monotonic_ns() - 1'200'000'000);  // silent 1.2 s here: over half of --hang-timeout 2
  f.inquiry->on_stop_order(hang_of(2, 1, 4001));
  REQUIRE(f.killed.size() == 1);
  CHECK(f.killed[0] == std::vector<int>{1});
}

TEST_CASE("without --hang-timeout here, a rank named hung must have been silent 10 s on this node") {
  Fixture f;
  f.config.hang_timeout = std::chrono::milliseconds(0);
  f.beat(0, 3, monotonic_ns() - 5 * kSec);
  f.inquiry->on_stop_order(hang_of(2, 0, 4000));
  CHECK(f.killed.empty());
  f.beat(0, 3, monotonic_ns() - rdzv::kUnconfirmedWithoutTimeoutMs * 1'000'000 - kSec);
  f.inquiry->on_stop_order(hang_of(2, 0, 4000));
  REQUIRE(f.killed.size() == 1);
  CHECK(f.killed[0] == std::vector<int>{0});
}

TEST_CASE("a verdict that could not tell kills every worker here silent for the timeout, on every node") {
  Fixture f;
  const std::int64_t now = monotonic_ns();
  f.beat(0, 4, now - 5 * kSec);  // silent 5 s: one of the ranks the verdict could not tell apart
  f.beat(1, 4, now);             // beating: not one of them
  rdzv::Failure unsure = hang_of(0, 0, 1);  // its rank is only the first of them, on another node
  unsure.unsure = true;
  f.inquiry->on_stop_order(unsure);
  REQUIRE(f.killed.size() == 1);
  CHECK(f.killed[0] == std::vector<int>{0});
}

TEST_CASE("a deferral for a quiet phase exempts the silent workers here until its bound, not the quiet ones") {
  Fixture f;
  f.inquiry->start_round();
  const std::int64_t now = monotonic_ns();
  f.quiet(0, now + 60 * kSec);  // rank 4 saves
  f.beat(0, 3, now - 3 * kSec);
  f.beat(1, 3, now - 3 * kSec);  // rank 5 waits for it: silent past the 2 s timeout
  f.inquiry->on_deferred(rdzv::HangDeferredMsg{{4}, 60'000, {}});
  // The watch looked at once and found nobody hung: no capture began, nothing was reported or killed.
  CHECK_FALSE(f.inquiry->inquiring());
  CHECK(f.views.empty());
  CHECK(f.killed.empty());
  // A new round forgets the exemption (and what was found hung).
  f.inquiry->start_round();
  CHECK_FALSE(f.inquiry->found_hung(1));
}
