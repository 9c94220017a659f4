// Starting a round's workers (agent/worker_launcher.hpp): every worker begun before any exec is waited for; an
// exec that fails is a failure of that rank with the program's code; what ran out is said with what to raise;
// the forking stops when the host says the job was stopped.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <cerrno>

#include "agent/worker_launcher.hpp"
#include "temp_dir.hpp"

using namespace ddprun::agent;

namespace {

struct Fixture {
  TempDir dir;
  boost::asio::io_context io;
  AgentConfig config;
  World world;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  EventLog events;
  RunLayout layout = RunLayout::create(dir.path, "launch");
  std::unique_ptr<OutputRouting> output;
  int forks_allowed = 100;
  std::vector<int> planned;  // local ranks whose facts were asked for

  Fixture() {
    config.output.redirects.all = kStdout | kStderr;  // files only: nothing on the test's console
    config.log_dir = dir.path;
    config.base_env = {"PATH=/usr/bin:/bin"};
    world.local_world_size = 3;
    world.world_size = 3;
    layout.prepare_attempt(0, 3);
    output = std::make_unique<OutputRouting>(io, config, world, log, events, [] {});
    output->start();
  }
  ~Fixture() { layout.cleanup(); }
  WorkerLauncher launcher() {
    WorkerLauncher::Host h;
    h.facts = [this](int lr, const OutputRouting::Target&) {
      planned.push_back(lr);
      WorkerFacts f;
      f.agent_pid = ::getpid();
      f.error_file = layout.error_file(0, lr);
      return f;
    };
    h.may_fork = [this] { return forks_allowed-- > 0; };
    return WorkerLauncher(config, world, layout, *output, h);
  }
  static void reap(const std::vector<pid_t>& pids) {
    for (pid_t pid : pids)
      if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
};

}  // namespace

TEST_CASE("every worker of the round started, in local rank order") {
  Fixture f;
  f.config.program = "/bin/true";
  f.config.argv = {"true"};
  const WorkerLauncher::Round round = f.launcher().launch();
  CHECK(round.pids.size() == 3);
  CHECK(round.started() == 3);
  CHECK_FALSE(round.failed);
  CHECK(f.planned == std::vector<int>{0, 1, 2});
  Fixture::reap(round.pids);
}

TEST_CASE("a program that cannot be executed: the first rank's failure, the others' beside it, code 127") {
  Fixture f;
  f.config.program = f.dir.path + "/no-such-program";
  f.config.argv = {"no-such-program"};
  const WorkerLauncher::Round round = f.launcher().launch();
  CHECK(round.started() == 0);
  REQUIRE(round.failed);
  CHECK(round.failed->local_rank == 0);
  CHECK(round.failed->status.code == 127);
  CHECK(round.failed->reason.find("no-such-program") != std::string::npos);
  REQUIRE(round.more.size() == 2);
  CHECK(round.more[0].local_rank == 1);
  CHECK(round.more[1].local_rank == 2);
}

TEST_CASE("a job stopped while its workers are forked: no more are begun") {
  Fixture f;
  f.config.program = "/bin/true";
  f.config.argv = {"true"};
  f.forks_allowed = 1;
  const WorkerLauncher::Round round = f.launcher().launch();
  CHECK(round.pids.size() == 1);
  CHECK(round.started() == 1);
  Fixture::reap(round.pids);
}

TEST_CASE("what ran out is said with what to do about it") {
  CHECK(WorkerLauncher::resource_advice(EMFILE, "pipe2").find("ulimit -n") != std::string::npos);
  CHECK(WorkerLauncher::resource_advice(ENFILE, "pipe2").find("fs.file-max") != std::string::npos);
  CHECK(WorkerLauncher::resource_advice(EAGAIN, "fork").find("ulimit -u") != std::string::npos);
  CHECK(WorkerLauncher::resource_advice(ENOMEM, "fork") == "fork: out of memory");
  CHECK(WorkerLauncher::resource_advice(EPERM, "fork") == "fork");
}
