// Embedded spawn and the error file across processes, and the Fashion-MNIST example as a smoke test.
// No LibTorch here: the roles only need processes.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <regex>
#include <thread>

#include "examples/fashion_mnist/idx.hpp"
#include "tests/worker_sdk/test_support.hpp"
#include "worker_sdk/error.hpp"
#include "worker_sdk/world.hpp"

namespace sdk = ddprun::sdk;
namespace ex = ddprun::examples;
using sdk::test::kCpuCollectives;
using sdk::test::TempDir;
using Clock = std::chrono::steady_clock;

namespace {

// Written whole, then renamed: a reader never sees the file empty.
void write_pid(const std::string& dir) {
  const std::string path = dir + "/pid-" + sdk::env_or("RANK", "x");
  std::ofstream(path + ".tmp") << ::getpid();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Waits (bounded) until every rank has written its pid, so the failure hits running peers and the test
// knows every pid (a rank torn down while still starting would have none).
void wait_for_all(const std::string& dir) {
  const int world = std::stoi(sdk::env_or("WORLD_SIZE", "1"));
  for (int r = 0; r < world; ++r) {
    const std::string path = dir + "/pid-" + std::to_string(r);
    for (int i = 0; i < 500 && ::access(path.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Time from the failing rank's last act until now.
Clock::duration since_failure(const std::string& dir) {
  return Clock::now() - Clock::time_point(Clock::duration(std::stoll(sdk::test::read_text(dir + "/failed-at"))));
}

std::vector<int> pids(const std::string& dir, int n) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) out.push_back(std::stoi(sdk::test::read_text(dir + "/pid-" + std::to_string(r))));
  return out;
}

}  // namespace

SDK_TEST_ROLE("fail_one") {
  write_pid(dir);
  if (sdk::env_or("RANK", "") == "0") {
    if (sdk::env_or("SDK_TEST_STUBBORN", "") == "1") std::signal(SIGTERM, SIG_IGN);
    ::pause();
    return 0;
  }
  wait_for_all(dir);
  // steady_clock is CLOCK_MONOTONIC: comparable across processes, so the test can time the teardown alone
  // (process start-up on a loaded machine is no part of the guarantee).
  std::ofstream(dir + "/failed-at") << Clock::now().time_since_epoch().count() << std::endl;
  if (sdk::env_or("SDK_TEST_STUBBORN", "") == "1") ::raise(SIGKILL);
  return 3;
}

TEST_SUITE("spawn") {
  TEST_CASE("one worker's failure stops the others and its exit code is passed on") {
    TempDir dir;
    CHECK(sdk::test::run_ranks("fail_one", 3, dir.path()) == 3);
    CHECK(since_failure(dir.path()) < std::chrono::seconds(3));  // SIGTERM, not the 5 s grace
    for (int pid : pids(dir.path(), 3)) CHECK_FALSE(sdk::test::process_alive(pid));
  }

  TEST_CASE("a worker ignoring SIGTERM is killed after the grace; a signal death gives 128+N") {
    TempDir dir;
    CHECK(sdk::test::run_ranks("fail_one", 2, dir.path(), {{"SDK_TEST_STUBBORN", "1"}}, 300) == 128 + SIGKILL);
    auto took = since_failure(dir.path());
    CHECK(took >= std::chrono::milliseconds(300));  // the grace was granted
    CHECK(took < std::chrono::seconds(3));
    for (int pid : pids(dir.path(), 2)) CHECK_FALSE(sdk::test::process_alive(pid));
  }
}

namespace {
char g_signal_note[512];  // where the handler writes the signal's number (set before it is installed)

extern "C" void note_signal(int sig) {
  const int fd = ::open(g_signal_note, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const char digits[2] = {static_cast<char>('0' + sig / 10), static_cast<char>('0' + sig % 10)};
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(fd, digits, 2);
    ::close(fd);
  }
  ::_exit(128 + sig);
}
}  // namespace

SDK_TEST_ROLE("note_signal") {
  std::snprintf(g_signal_note, sizeof g_signal_note, "%s/signal-%s", dir.c_str(), sdk::env_or("RANK", "x").c_str());
  for (int sig : {SIGINT, SIGTERM}) std::signal(sig, note_signal);
  write_pid(dir);
  for (;;) ::pause();
}

TEST_SUITE("spawn") {
  TEST_CASE("a signal to the supervisor reaches every worker as it came, and the job exits 128+N") {
    TempDir dir;
    std::thread sender([&] {
      sigset_t all;  // this thread must never take the signal itself: the supervisor's signalfd does
      sigfillset(&all);
      ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
      for (int r = 0; r < 2; ++r)
        for (int i = 0; i < 1000 && ::access((dir.path() + "/pid-" + std::to_string(r)).c_str(), F_OK) != 0; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ::kill(::getpid(), SIGINT);
    });
    const int code = sdk::test::run_ranks("note_signal", 2, dir.path());
    sender.join();
    CHECK(code == 128 + SIGINT);
    for (int r = 0; r < 2; ++r)  // SIGINT, as ddprun and torchrun pass it on (this supervisor once sent SIGTERM)
      CHECK(sdk::test::read_text(dir.path() + "/signal-" + std::to_string(r)) == "02");
    for (int pid : pids(dir.path(), 2)) CHECK_FALSE(sdk::test::process_alive(pid));
  }
}

SDK_TEST_ROLE("throw") {
  DDPRUN_SDK_CHECK(sdk::env_or("RANK", "0") != "1", "rank 1 cannot go on: the sky fell");
  ::pause();
  return 0;
}

SDK_TEST_ROLE("spawn_throw") { return sdk::test::run_ranks("throw", 2, dir); }

TEST_CASE("an exception is written to the error file and shown by the supervisor" * doctest::test_suite("error_file")) {
  TempDir dir;
  std::string out;
  std::map<std::string, std::string> env{{"RANK", "1"}, {"TORCHELASTIC_ERROR_FILE", dir / "err.json"}};
  CHECK(sdk::test::run_program({"/proc/self/exe", "--role", "throw", dir.path()}, env, out) == 1);
  std::string json = sdk::test::read_text(dir / "err.json");
  CHECK(json.find("\"message\": \"ddprun::sdk::Error: rank 1 cannot go on: the sky fell\"") != std::string::npos);
  CHECK(json.find("sdk_process_test.cpp:") != std::string::npos);
  // Through embedded spawn: the root cause line carries the message, and the exit code is the worker's.
  CHECK(sdk::test::run_program({"/proc/self/exe", "--role", "spawn_throw", dir.path()}, {}, out) == 1);
  CHECK(out.find("rank 1 (pid") != std::string::npos);
  CHECK(out.find("failed with exit code 1: ddprun::sdk::Error: rank 1 cannot go on: the sky fell") != std::string::npos);
}

#ifdef SDK_TEST_FASHION_MNIST
namespace {
// A Fashion-MNIST look-alike: n images whose label is readable from the pixels.
void write_split(const std::string& dir, const std::string& prefix, int64_t n) {
  ex::IdxArray images{{n, 28, 28}, std::vector<std::uint8_t>(static_cast<size_t>(n) * 784)};
  ex::IdxArray labels{{n}, std::vector<std::uint8_t>(static_cast<size_t>(n))};
  for (int64_t i = 0; i < n; ++i) {
    auto label = static_cast<std::uint8_t>((i * 7) % 10);
    labels.data[static_cast<size_t>(i)] = label;
    for (int p = 0; p < 784; ++p) {
      images.data[static_cast<size_t>(i * 784 + p)] = static_cast<std::uint8_t>((p / 28 == label * 2) ? 255 : (p * 13 + i) % 50);
    }
  }
  ex::write_idx(dir + "/" + prefix + "-images-idx3-ubyte.gz", images);
  ex::write_idx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", labels);
}
}  // namespace

TEST_SUITE("example" * doctest::skip(!kCpuCollectives)) {
  TEST_CASE("fashion_mnist trains on a small generated data set, checkpoints, and resumes at the next epoch") {
    TempDir dir;
    write_split(dir.path(), "train", 256);
    write_split(dir.path(), "t10k", 64);
    const std::string bin = SDK_TEST_FASHION_MNIST;
    const std::vector<std::string> common{bin, "--nproc", "2", "--batch-size", "16", "--log-every", "4",
                                          "--data-dir", dir.path(), "--checkpoint-dir", dir / "ckpt"};
    std::string out;
    auto args = common;
    args.insert(args.end(), {"--epochs", "1"});
    REQUIRE_MESSAGE(sdk::test::run_program(args, {}, out) == 0, out);
    CHECK(std::regex_search(out, std::regex("train epoch 1 step 4/8 loss [0-9.]+ throughput [0-9.]+ samples/s")));
    CHECK(std::regex_search(out, std::regex("(^|\n)epoch 1 test_loss [0-9]+\\.[0-9]{4} accuracy [0-9]+\\.[0-9]{2}%\n")));
    args = common;
    args.insert(args.end(), {"--epochs", "2", "--resume", "--syncbn"});
    // A checkpoint without BatchNorm does not fit the --syncbn model: resume must fail loudly.
    CHECK(sdk::test::run_program(args, {}, out) != 0);
    args.pop_back();
    REQUIRE_MESSAGE(sdk::test::run_program(args, {}, out) == 0, out);
    CHECK(out.find("at epoch 2") != std::string::npos);
    CHECK(out.find("epoch 1 test_loss") == std::string::npos);
    CHECK(out.find("epoch 2 test_loss") != std::string::npos);
  }

  TEST_CASE("fashion_mnist --syncbn runs, and a missing data set names its package") {
    TempDir dir;
    write_split(dir.path(), "train", 64);
    write_split(dir.path(), "t10k", 32);
    std::string out;
    const std::string bin = SDK_TEST_FASHION_MNIST;
    REQUIRE_MESSAGE(sdk::test::run_program({bin, "--nproc", "2", "--batch-size", "8", "--syncbn", "--max-steps", "3",
                                            "--data-dir", dir.path()}, {}, out) == 0, out);
    CHECK(out.find("epoch 1 test_loss") != std::string::npos);
    CHECK(sdk::test::run_program({bin, "--nproc", "2", "--data-dir", dir / "nothing"}, {}, out) == 1);
    CHECK(out.find("dataset-fashion-mnist") != std::string::npos);
  }
}
#endif
