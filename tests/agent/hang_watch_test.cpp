// Hang detection's rules, one per case: pure functions of beats and time (agent/hang_watch.hpp), the
// shared-memory slots read back as a worker writes them, the policy's view of a hung worker, and how the
// stack capture picks its tool and decides whether a worker asked for Python stacks.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "agent/hang_watch.hpp"
#include "agent/heartbeat_channel.hpp"
#include "agent/stack_capture.hpp"
#include "agent/supervision_policy.hpp"

using namespace ddprun::agent;

namespace {
constexpr std::int64_t kSec = 1'000'000'000;
WatchedWorker beat_at(int lr, std::int64_t t, std::int64_t step = 0) { return {lr, Beat{step, t}}; }
WatchedWorker never(int lr) { return {lr, Beat{}}; }
}  // namespace

TEST_CASE("a worker that never beat is never hung, however long it runs") {
  const HangCheck c = check_hangs({never(0)}, 2 * kSec, 1000 * kSec);
  CHECK(c.hung.empty());
}

// Issue 56: a joiner that hung after saying it was ready held the kept workers in the new group's set-up; they
// never beat in the new round, so nobody was judged, for good.
TEST_CASE("a worker kept through a re-form owes its first beat of the new round within the hang timeout") {
  WatchedWorker kept = never(0);
  kept.started_ns = 100 * kSec;  // the round was handed over then
  kept.promised = true;
  const HangCheck early = check_hangs({kept, never(1)}, 2 * kSec, 101 * kSec);
  CHECK(early.hung.empty());
  REQUIRE(early.next_check_ns);
  CHECK(*early.next_check_ns <= 102 * kSec);
  const HangCheck late = check_hangs({kept, never(1)}, 2 * kSec, 102 * kSec);
  CHECK(late.hung == std::vector<int>{0});  // the new worker beside it is still exempt: it never beat in the job
}

TEST_CASE("a worker silent for the whole timeout is hung") {
  const HangCheck c = check_hangs({beat_at(0, 10 * kSec), beat_at(1, 12 * kSec)}, 2 * kSec, 12 * kSec);
  CHECK(c.hung == std::vector<int>{0});
}

TEST_CASE("a worker that beat within the timeout is not hung, and the timer is armed for its deadline") {
  const HangCheck c = check_hangs({beat_at(0, 10 * kSec), beat_at(1, 11 * kSec)}, 2 * kSec, 11 * kSec);
  CHECK(c.hung.empty());
  REQUIRE(c.next_check_ns);
  CHECK(*c.next_check_ns == 12 * kSec);  // the earliest deadline: worker 0's
}

TEST_CASE("while a worker has not beaten yet, the timer looks again within a quarter of the timeout") {
  const HangCheck c = check_hangs({beat_at(0, 10 * kSec), never(1)}, 2 * kSec, 10 * kSec);
  REQUIRE(c.next_check_ns);
  CHECK(*c.next_check_ns == 10 * kSec + kSec / 2);  // before worker 0's deadline at 12 s
  CHECK(discovery_period_ns(100 * kSec) == kSec);          // at most a second
  CHECK(discovery_period_ns(kSec / 100) == kSec / 100);    // at least 10 ms
}

TEST_CASE("a beat from the future counts as now: the worker is not hung") {
  const HangCheck c = check_hangs({beat_at(0, 50 * kSec)}, 2 * kSec, 10 * kSec);
  CHECK(c.hung.empty());
  REQUIRE(c.next_check_ns);
  CHECK(*c.next_check_ns == 12 * kSec);
}

TEST_CASE("nothing to watch: no timer") {
  CHECK_FALSE(check_hangs({}, 2 * kSec, 10 * kSec).next_check_ns);
}

TEST_CASE("the hang message names the silence, the step, the last beat and the stacks") {
  CHECK(hang_message(3000, 41, 1'700'000'000'123, "/logs/hang_stacks.txt") ==
        "hung: no heartbeat for 3.0 s after step 41 (last beat at 2023-11-14T22:13:20.123Z); killed with SIGKILL; "
        "stacks in /logs/hang_stacks.txt");
  CHECK(hang_message(2500, -1, 0, "") ==
        "hung: no heartbeat for 2.5 s (last beat at 1970-01-01T00:00:00.000Z); killed with SIGKILL");
}

TEST_CASE("a slot written through the worker's own mapping reads back, and clear() forgets it") {
  HeartbeatChannel ch(3);
  REQUIRE(ch.enabled());
  CHECK_FALSE(ch.read(2).ever());
  // A worker maps the inherited descriptor itself: a second mapping of the same memfd shares the page.
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ch.fd(), 0);
  REQUIRE(p != MAP_FAILED);
  HeartbeatChannel::write(static_cast<char*>(p) + HeartbeatChannel::offset_of(2), 7, 123);
  CHECK(ch.read(2).step == 7);
  CHECK(ch.read(2).time_ns == 123);
  CHECK_FALSE(ch.read(1).ever());
  ch.clear();
  CHECK_FALSE(ch.read(2).ever());
  ::munmap(p, 4096);
}

TEST_CASE("a hung worker is the root cause, stops the others with SIGTERM, and stays failed when killed") {
  SupervisionPolicy p;
  for (int lr = 0; lr < 2; ++lr) p.add_worker(lr, lr, 100 + lr, 0);
  const Decision d = p.on_hung(1, 10);
  CHECK(d.teardown_began);
  CHECK(d.signal_all == SIGTERM);
  p.on_exit(1, ddprun::process::ExitStatus{true, 0, SIGKILL, false}, 11);
  p.on_exit(0, ddprun::process::ExitStatus{true, 0, SIGTERM, false}, 12);
  CHECK(p.worker(1).state == WorkerState::kFailed);
  CHECK(p.worker(0).state == WorkerState::kVictim);
  REQUIRE(p.root_cause() != nullptr);
  CHECK(p.root_cause()->local_rank == 1);
  CHECK(p.exit_code() == ddprun::kExitHung);  // 78: told apart from an OOM kill (137)
}

TEST_CASE("a worker found hung while the job already stops is no new root cause") {
  SupervisionPolicy p;
  for (int lr = 0; lr < 2; ++lr) p.add_worker(lr, lr, 100 + lr, 0);
  p.on_exit(0, ddprun::process::ExitStatus{false, 3, 0, false}, 5);
  const Decision d = p.on_hung(1, 10);
  CHECK_FALSE(d.teardown_began);
  CHECK(p.root_cause()->local_rank == 0);
}

TEST_CASE("the stack tool is eu-stack when installed, else gdb, else none") {
  const auto none = stack_tool_command(42, "/nonexistent");
  CHECK_FALSE(none.has_value());
  const bool eu = ::access("/usr/bin/eu-stack", X_OK) == 0;
  const bool gdb = ::access("/usr/bin/gdb", X_OK) == 0;
  const auto found = stack_tool_command(42, "/usr/bin");
  REQUIRE(found.has_value() == (eu || gdb));
  if (found) {
    CHECK(found->front() == (eu ? "eu-stack" : "gdb"));
    CHECK(std::find(found->begin(), found->end(), "42") != found->end());
  }
}

namespace {
void ignore_signal(int) {}
}  // namespace

TEST_CASE("a process catches the stacks signal only once it installed a handler for it") {
  const int sig = python_stacks_signal();
  CHECK(sig > SIGUSR2);  // a real-time signal, not one ddprun forwards as a notice
  CHECK_FALSE(catches_signal(::getpid(), sig));
  struct sigaction old {};
  struct sigaction sa {};
  sa.sa_handler = ignore_signal;
  ::sigaction(sig, &sa, &old);
  CHECK(catches_signal(::getpid(), sig));
  ::sigaction(sig, &old, nullptr);
  CHECK_FALSE(catches_signal(::getpid(), sig));
}

TEST_CASE("with an initial timeout, a worker that never beat is hung once that long has passed since its start") {
  WatchedWorker w = never(0);
  w.started_ns = 100 * kSec;
  // Before the deadline: not hung, and the timer is armed no later than it (nor than the discovery period).
  HangCheck c = check_hangs({w}, 2 * kSec, 150 * kSec, 60 * kSec);
  CHECK(c.hung.empty());
  REQUIRE(c.next_check_ns);
  CHECK(*c.next_check_ns <= 160 * kSec);
  c = check_hangs({w}, 2 * kSec, 160 * kSec, 60 * kSec);
  CHECK(c.hung == std::vector<int>{0});
  // Once it beat, the initial timeout no longer applies: the steady timeout does.
  WatchedWorker beaten = beat_at(0, 159 * kSec);
  beaten.started_ns = 100 * kSec;
  CHECK(check_hangs({beaten}, 2 * kSec, 160 * kSec, 60 * kSec).hung.empty());
  // 0: off, as before.
  CHECK(check_hangs({w}, 2 * kSec, 1000 * kSec, 0).hung.empty());
}

TEST_CASE("the initial timeout's message says the worker never beat") {
  const std::string m = hang_message(60'000, -1, 0, "/run/x/hang_stacks.txt", true);
  CHECK(m.rfind("hung: no first heartbeat 60.0 s after its start", 0) == 0);
  CHECK(m.find("stacks in /run/x/hang_stacks.txt") != std::string::npos);
}

TEST_CASE("a declared quiet phase keeps a silent worker from being hung until it ends, and no longer") {
  WatchedWorker w = beat_at(0, 10 * kSec);
  w.beat.quiet_until_ns = 22 * kSec;  // "silent for at most 12 s from now"
  HangCheck c = check_hangs({w}, 2 * kSec, 20 * kSec);
  CHECK(c.hung.empty());
  REQUIRE(c.next_check_ns);
  // Looked at again within the discovery period (the phase may end early), and never later than its end.
  CHECK(*c.next_check_ns == 20 * kSec + discovery_period_ns(2 * kSec));
  CHECK(check_hangs({w}, 2 * kSec, 21 * kSec + kSec / 2).next_check_ns == 22 * kSec);
  CHECK(check_hangs({w}, 2 * kSec, 22 * kSec).hung == std::vector<int>{0});
  // A phase shorter than the timeout changes nothing.
  w.beat.quiet_until_ns = 11 * kSec;
  CHECK(check_hangs({w}, 2 * kSec, 11 * kSec + kSec / 2).hung.empty());
  CHECK(check_hangs({w}, 2 * kSec, 12 * kSec).hung == std::vector<int>{0});
}

// Issue 32: the SDK example loads its data in a 10-minute quiet phase; the timer, armed for that bound, slept
// through a rank SIGSTOPped right after the phase ended, and no verdict ever came.
TEST_CASE("a quiet phase that ends early: the timer wakes within the discovery period and judges its last beat") {
  WatchedWorker w = beat_at(0, 10 * kSec);
  w.beat.quiet_until_ns = 610 * kSec;  // "at most 10 minutes"
  HangCheck c = check_hangs({w}, 4 * kSec, 10 * kSec);
  REQUIRE(c.next_check_ns);
  CHECK(*c.next_check_ns <= 11 * kSec);
  // The phase closed at 12 s with a beat, then the worker stopped: hung 4 s later, seen within a second.
  w.beat = Beat{5, 12 * kSec};
  c = check_hangs({w}, 4 * kSec, 12 * kSec + kSec / 2);
  REQUIRE(c.next_check_ns);
  CHECK(*c.next_check_ns == 16 * kSec);
  CHECK(check_hangs({w}, 4 * kSec, 16 * kSec).hung == std::vector<int>{0});
}

TEST_CASE("an exemption from the job-wide inquiry holds a silent worker until its end, and no longer") {
  WatchedWorker w = beat_at(0, 10 * kSec);
  w.exempt_until_ns = 30 * kSec;
  HangCheck c = check_hangs({w}, 2 * kSec, 20 * kSec);
  CHECK(c.hung.empty());
  REQUIRE(c.next_check_ns);
  CHECK(*c.next_check_ns == 20 * kSec + discovery_period_ns(2 * kSec));
  CHECK(check_hangs({w}, 2 * kSec, 29 * kSec).hung.empty());
  CHECK(check_hangs({w}, 2 * kSec, 30 * kSec).hung == std::vector<int>{0});
  // A beat after the exemption's start: judged by the beat again.
  w.beat.time_ns = 29 * kSec;
  CHECK(check_hangs({w}, 2 * kSec, 30 * kSec).hung.empty());
}

TEST_CASE("the slot carries the quiet phase as a worker writes it, and a new round clears it") {
  HeartbeatChannel ch(2);
  void* mapped = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ch.fd(), 0);
  REQUIRE(mapped != MAP_FAILED);
  auto* slot = static_cast<unsigned char*>(mapped) + HeartbeatChannel::offset_of(1);
  HeartbeatChannel::write_quiet(slot, 99 * kSec);
  HeartbeatChannel::write(slot, 7, 5 * kSec);
  CHECK(ch.read(1).quiet_until_ns == 99 * kSec);
  CHECK(ch.read(0).quiet_until_ns == 0);
  ch.clear();
  CHECK(ch.read(1).quiet_until_ns == 0);
  ::munmap(mapped, 4096);
}

TEST_CASE("re-forming in place in the slot: the worker's offer and take-up, the agent's announcement") {
  HeartbeatChannel ch(2);
  void* mapped = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ch.fd(), 0);
  REQUIRE(mapped != MAP_FAILED);
  auto* slot = static_cast<unsigned char*>(mapped) + HeartbeatChannel::offset_of(1);
  auto at = [&](std::size_t offset) { return reinterpret_cast<std::int64_t*>(slot + offset); };
  CHECK(ch.reforms_taken(1) == 0);  // offers nothing until it says so
  *at(ddprun::contract::kBeatReformsTakenOffset) = 1;  // the offer (ddprun_heartbeat.offer_reforms)
  CHECK(ch.reforms_taken(1) == 1);
  CHECK(ch.reforms_taken(0) == 0);
  HeartbeatChannel::write(slot, 41, 5 * kSec);
  ch.announce_reform(1, 1);
  ch.forget_beats(1);  // the new round starts without a beat
  CHECK(*at(ddprun::contract::kBeatReformsAnnouncedOffset) == 1);
  CHECK_FALSE(ch.read(1).ever());
  CHECK(ch.read(1).step == -1);
  *at(ddprun::contract::kBeatReformsTakenOffset) = 2;  // took re-form 1 up
  CHECK(ch.reforms_taken(1) == 2);
  ch.clear();  // new workers offer afresh
  CHECK(ch.reforms_taken(1) == 0);
  CHECK(*at(ddprun::contract::kBeatReformsAnnouncedOffset) == 0);
  ::munmap(mapped, 4096);
}

TEST_CASE("the torch.distributed call a Python worker waits in is read from its faulthandler stacks") {
  const std::string dump =
      "Thread 0x00007f3a1c5fe6c0 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 327 in wait\n"
      "\n"
      "Current thread 0x00007f3a2a0b5740 (most recent call first):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1536 in all_reduce\n"
      "  File \"/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py\", line 81 in wrapper\n"
      "  File \"/tmp/job.py\", line 9 in <module>\n";
  CHECK(torch_collective_in(dump) == "all_reduce");
  CHECK(torch_collective_in("  File \"/tmp/job.py\", line 3 in stuck_in_loader\n") == "");
  CHECK(torch_collective_in("") == "");
  CHECK(torch_collective_in("  File \"x/distributed_c10d.py\", line 2 in barrier") == "barrier");  // no newline
}

// Issue 32: the README loop beats after opt.step(); the ranks waiting for a stuck one sit in DDP's backward,
// which has no distributed_c10d frame, and counted as "outside any collective" like the culprit.
TEST_CASE("a rank inside torch.autograd's backward waits in DDP's gradient all-reduce; a stuck one does not") {
  const std::string waiting =
      "Thread 0x00007f3a1c5fe6c0 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 327 in wait\n"
      "\n"
      "Current thread 0x00007f3a2a0b5740 (most recent call first):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/autograd/__init__.py\", line 197 in backward\n"
      "  File \"/usr/lib/python3/dist-packages/torch/_tensor.py\", line 487 in backward\n"
      "  File \"/tmp/job.py\", line 12 in <module>\n";
  CHECK(torch_collective_in(waiting) == "backward");
  CHECK(torch_collective_in("Current thread 0x1 (most recent call first):\n"
                            "  File \"/x/torch/autograd/graph.py\", line 825 in _engine_run_backward\n"
                            "  File \"/x/torch/autograd/__init__.py\", line 347 in backward\n") == "backward");
  // The culprit: asleep before its forward, or in a custom Function's Python backward (not the engine).
  CHECK(torch_collective_in("Current thread 0x1 (most recent call first):\n"
                            "  File \"/tmp/job.py\", line 9 in <module>\n") == "");
  CHECK(torch_collective_in("Current thread 0x1 (most recent call first):\n"
                            "  File \"/tmp/job.py\", line 30 in backward\n"
                            "  File \"/x/torch/autograd/__init__.py\", line 197 in backward\n") == "");
}

TEST_CASE("a C++ worker's native stacks say whether a thread waits for the other ranks") {
  CHECK(native_collective_in("#3 0x7f c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long>)\n") ==
        "gloo");
  CHECK(native_collective_in("#5 0x7f ddprun::sdk::GlooRing::wait_all()\n") == "gloo");
  CHECK(native_collective_in("#2 0x7f c10d::Work::wait(std::chrono::duration<long>)\n"
                             "#3 0x55 ddprun::sdk::ProcessGroup::allreduce(at::Tensor&)\n") == "gloo");
  CHECK(native_collective_in("#2 0x7f c10d::Reducer::finalize_backward()\n") == "backward");
  // Every process has gloo's device loop, idle ProcessGroupGloo workers and the SDK's idle ring thread: no wait
  // (the SDK example's skip_allreduce role: rank 0 in pause() with all three, rank 1 in Work::wait).
  CHECK(native_collective_in("#1 0x7f gloo::transport::tcp::Device::loop()\n"
                             "#1 0x7f gloo::transport::tcp::Loop::run()\n"
                             "#2 0x7f c10d::ProcessGroupGloo::runLoop(int)\n"
                             "#2 0x55 ddprun::sdk::GlooRing::run()\n") == "");
}
