// Where the workers' output goes (agent/output_routing.hpp), with real pipes, real log files and the real
// loop, and no worker: the test writes into a pipe as a worker would. Console targets are left to the
// integration tests (test_output.py, test_stalled_console.py): the console is this test's own stdout.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/output_routing.hpp"
#include "temp_dir.hpp"

using namespace ddprun::agent;

namespace {

struct Fixture {
  boost::asio::io_context io;
  AgentConfig config;
  World world;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  EventLog events;
  int stream_ends = 0;
  std::unique_ptr<OutputRouting> routing;
  TempDir dir;

  Fixture() {
    config.output.redirects.all = kStdout | kStderr;  // files only
    config.log_dir = dir.path;
    routing = std::make_unique<OutputRouting>(io, config, world, log, events, [this] { ++stream_ends; });
    routing->start();
  }
  // A worker's stream: returns the write end, the routing reads the other.
  int add(int rank, int local_rank, int bit, const std::string& path) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    routing->add_stream(rank, local_rank, bit, fds[0], routing->target_of(local_rank, bit), path);
    return fds[1];
  }
  void run_until(const std::function<bool()>& done) {
    for (int i = 0; i < 2000 && !done(); ++i) {
      io.restart();  // a loop that ran out of work stays stopped until restarted
      io.run_for(std::chrono::milliseconds(5));
      // Out of work, run_for returns at once: what comes next comes from a writer thread (a failed log file).
      if (io.stopped()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE(done());
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

}  // namespace

TEST_CASE("a stream's target: --redirects to a file only, --tee to both, --local-ranks-filter hides the console") {
  Fixture f;
  CHECK_FALSE(f.routing->target_of(0, kStdout).console);
  CHECK(f.routing->target_of(0, kStdout).file);
  f.config.output.redirects = {};
  f.config.output.tee.per_rank_given = true;
  f.config.output.tee.per_rank[1] = kStderr;
  f.config.output.console_local_ranks = {1};
  const auto plain = f.routing->target_of(0, kStderr);
  CHECK_FALSE(plain.any());  // filtered out of the console, not teed: the child writes to /dev/null
  const auto teed = f.routing->target_of(1, kStderr);
  CHECK(teed.console);
  CHECK(teed.file);
  CHECK_FALSE(f.routing->target_of(1, kStdout).file);
}

TEST_CASE("a redirected stream reaches its file whole, its stderr's end is kept, and the round drains") {
  Fixture f;
  const std::string out = f.dir.path + "/stdout.log", err = f.dir.path + "/stderr.log";
  const int out_fd = f.add(4, 0, kStdout, out);
  const int err_fd = f.add(4, 0, kStderr, err);
  CHECK_FALSE(f.routing->round_drained(false));
  REQUIRE(::write(out_fd, "step 1\nstep 2\npartial", 21) == 21);
  REQUIRE(::write(err_fd, "Traceback ...\nValueError: x\n", 28) == 28);
  ::close(out_fd);
  ::close(err_fd);
  f.run_until([&] { return f.stream_ends == 2; });
  CHECK(f.routing->round_drained(false));
  CHECK_FALSE(f.routing->stalled());
  f.routing->drain_files_after_loop(false);
  CHECK(Fixture::read(out) == "step 1\nstep 2\npartial");  // raw bytes: no prefix in a file, nothing lost
  CHECK(Fixture::read(err) == "Traceback ...\nValueError: x\n");
  REQUIRE(f.routing->stderr_tail(0) != nullptr);
  CHECK(f.routing->stderr_tail(1) == nullptr);
  CHECK(f.routing->losses().empty());
}

TEST_CASE("a log file that cannot be created is a loss for the summary; the stream is still read to its end") {
  Fixture f;
  { std::ofstream blocker(f.dir.path + "/file"); blocker << "x\n"; }
  struct stat st {};
  REQUIRE(::stat((f.dir.path + "/file").c_str(), &st) == 0);
  REQUIRE(S_ISREG(st.st_mode));
  const int fd = f.add(0, 0, kStdout, f.dir.path + "/file/stdout.log");  // ENOTDIR, even for root
  REQUIRE(::write(fd, "lost\n", 5) == 5);
  ::close(fd);
  f.run_until([&] { return f.stream_ends == 1 && !f.routing->losses().empty(); });
  const auto losses = f.routing->losses();
  REQUIRE(losses.size() == 1);
  CHECK(losses[0].find("rank 0's " + f.dir.path + "/file/stdout.log could not be created") == 0);
}

TEST_CASE("a new round retires the streams of the last: the end waits for them, a restart does not") {
  Fixture f;
  const int old_fd = f.add(0, 0, kStdout, f.dir.path + "/a0.log");
  f.routing->retire_round();                 // the old stream is still open: it drains beside the next round
  CHECK(f.routing->round_drained(true));     // the new round has no stream yet
  CHECK_FALSE(f.routing->round_drained(false));  // the job's end waits for the retired stream
  ::close(old_fd);
  f.run_until([&] { return f.routing->round_drained(false); });
  f.routing->drain_files_after_loop(false);
}

TEST_CASE("a stream that begins to wait for room is told to the agent at once, as an end is") {
  // A restart does not wait for a stream held by a congested console or file (round_drained(true)), but the
  // agent only looks again when a stream tells it something. Before, a stream that began waiting after the last
  // worker was reaped left the restart waiting for the console (integration.supervisor_matrix, loaded CI).
  // Here the log file is a FIFO whose reader reads nothing: the writer thread blocks, the queue passes its high
  // water mark, the stream waits for room.
  Fixture f;
  const std::string fifo = f.dir.path + "/stalled.log";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int held = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a reader that does not read
  REQUIRE(held >= 0);
  const int fd = f.add(0, 0, kStdout, fifo);
  std::atomic<bool> written{false};
  std::thread writer([fd, &written] {
    const std::string chunk(1 << 16, 'x');
    for (std::size_t sent = 0; sent < kOutputHighWater + (2u << 20);) {
      const ssize_t n = ::write(fd, chunk.data(), chunk.size());
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    written = true;
  });
  f.run_until([&] { return f.stream_ends > 0; });
  CHECK_FALSE(written);                          // the worker is held in its write: the stream has not ended
  CHECK(f.routing->round_drained(true));         // a restart goes on
  CHECK_FALSE(f.routing->round_drained(false));  // the job's end still waits for it
  // Unblock: read the FIFO; the queue drains, the stream resumes, the writer finishes and closes its end.
  std::thread reader([held] {
    ::fcntl(held, F_SETFL, ::fcntl(held, F_GETFL) & ~O_NONBLOCK);
    char buf[1 << 16];
    while (::read(held, buf, sizeof buf) > 0) {
    }
    ::close(held);
  });
  f.run_until([&] { return written.load(); });
  writer.join();
  ::close(fd);
  f.run_until([&] { return f.routing->round_drained(false); });
  f.routing->drain_files_after_loop(false);
  reader.join();
}
