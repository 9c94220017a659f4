// The Boost-free process primitives against real children.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <set>
#include <string>

#include "common/process/job_cgroup.hpp"
#include "common/process/ports.hpp"
#include "common/process/process_tree.hpp"
#include "common/process/spawn.hpp"
#include "common/process/wait_status.hpp"

using namespace ddprun::process;

namespace {
// A regular file without execute permission, removed when the guard goes.
struct PlainFile {
  std::string path = "/tmp/ddprun_plain_fileXXXXXX";
  PlainFile() {
    const int fd = ::mkstemp(path.data());
    ::fchmod(fd, 0644);
    ::close(fd);
  }
  ~PlainFile() { ::unlink(path.c_str()); }
};

// Everything the pipe's read end gives until every writer closed it; the end is closed.
std::string read_to_end(int fd) {
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return text;
}

ExitStatus run_to_end(const std::vector<std::string>& argv) {
  SpawnOptions o;
  o.program = argv[0];
  o.argv = argv;
  o.env = {"PATH=/usr/bin:/bin"};
  const pid_t pid = spawn(o);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return decode_wait_status(status);
}
}  // namespace

TEST_CASE("exit codes and signals are decoded as a shell reports them") {
  CHECK(run_to_end({"sh", "-c", "exit 7"}).shell_code() == 7);
  const auto s = run_to_end({"sh", "-c", "kill -SEGV $$"});
  CHECK(s.signaled);
  CHECK(s.signal == SIGSEGV);
  CHECK(s.shell_code() == 139);
  CHECK(s.describe().find("SIGSEGV") != std::string::npos);
}

TEST_CASE("a program that cannot be executed raises ExecError with 127 or 126") {
  SpawnOptions o;
  o.program = "/nonexistent/program";
  o.argv = {o.program};
  try {
    spawn(o);
    FAIL("spawn should throw");
  } catch (const ExecError& e) {
    CHECK(e.exit_code() == 127);
  }
  PlainFile plain;
  o.program = plain.path;  // exists, not executable
  o.argv = {o.program};
  try {
    spawn(o);
    FAIL("spawn should throw");
  } catch (const ExecError& e) {
    CHECK(e.exit_code() == 126);
  }
}

TEST_CASE("the child leads its own process group, with default signal dispositions") {
  std::signal(SIGUSR1, SIG_IGN);  // exec keeps ignored signals: spawn must restore the default
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  SpawnOptions o;
  o.program = "sh";
  o.argv = {"sh", "-c", "echo $$ $(ps -o pgid= -p $$); kill -USR1 $$; echo survived"};
  o.env = {"PATH=/usr/bin:/bin"};
  o.stdout_fd = fds[1];
  const pid_t pid = spawn(o);
  ::close(fds[1]);
  const std::string buf = read_to_end(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::signal(SIGUSR1, SIG_DFL);
  int self = 0, group = 0;
  REQUIRE(std::sscanf(buf.c_str(), "%d %d", &self, &group) == 2);
  CHECK(self == group);
  CHECK(buf.find("survived") == std::string::npos);
  CHECK(decode_wait_status(status).signal == SIGUSR1);
}

TEST_CASE("a child given the guard's pipe tells it its own group before exec") {
  // The parent watches each worker's group only once the round's workers all started; a SIGKILL of ddprun in
  // between left a helper that dropped its environment behind (integration.guard_escapes under load).
  int guard[2], out[2];
  REQUIRE(::pipe(guard) == 0);
  REQUIRE(::pipe(out) == 0);
  SpawnOptions o;
  o.program = "sh";
  o.argv = {"sh", "-c", "echo ran"};
  o.env = {"PATH=/usr/bin:/bin"};
  o.stdout_fd = out[1];
  o.guard_fd = guard[1];
  const pid_t pid = spawn(o);
  ::close(guard[1]);
  ::close(out[1]);
  const std::string told = read_to_end(guard[0]);
  read_to_end(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(told == "G " + std::to_string(pid) + "\n");  // its pid is its group's id: it leads the group
  CHECK(decode_wait_status(status).code == 0);

  // Without a group of its own there is no group to tell about.
  REQUIRE(::pipe(guard) == 0);
  o.new_process_group = false;
  o.guard_fd = guard[1];
  o.stdout_fd = -1;
  o.argv = {"sh", "-c", "exit 0"};
  const pid_t same_group = spawn(o);
  ::close(guard[1]);
  CHECK(read_to_end(guard[0]).empty());
  ::waitpid(same_group, &status, 0);
}

TEST_CASE("PATH resolution reports not found, directory and not executable") {
  CHECK(resolve_program("sh", "/usr/bin:/bin").check == ProgramCheck::kOk);
  CHECK(resolve_program("no-such-program-xyz", "/usr/bin:/bin").check == ProgramCheck::kNotFound);
  CHECK(resolve_program("/tmp", "").check == ProgramCheck::kIsDirectory);
  PlainFile plain;
  CHECK(resolve_program(plain.path, "").check == ProgramCheck::kNotExecutable);
}

TEST_CASE("signal names parse both ways") {
  CHECK(parse_signal("KILL") == SIGKILL);
  CHECK(parse_signal("sigterm") == SIGTERM);
  CHECK(parse_signal("10") == 10);
  CHECK(parse_signal("nonsense") == 0);
  CHECK(signal_name(SIGINT) == "SIGINT");
}

TEST_CASE("MASTER_PORT picks are free, outside the kernel's ephemeral range, and not all the same") {
  const auto [lo, hi] = ddprun::process::ephemeral_port_range();
  CHECK(0 < lo);
  CHECK(lo <= hi);
  std::set<int> seen;
  for (int i = 0; i < 20; ++i) {
    const int port = ddprun::process::pick_master_port("127.0.0.1");
    REQUIRE(port > 0);
    if (lo - 20000 > 1000) CHECK((port >= 20000 && port < lo));  // this machine's range leaves room below it
    CHECK(ddprun::process::probe_tcp_port("127.0.0.1", port) == port);  // free: nothing kept it bound
    seen.insert(port);
  }
  CHECK(seen.size() > 10);  // random: two launchers on one machine rarely pick the same
}

TEST_CASE("a child given the job's cgroup starts in it, created there or moved in") {
  JobCgroup cg = JobCgroup::create("spawn-test-" + std::to_string(::getpid()));
  if (!cg.active()) {
    MESSAGE("skipped: no job cgroup can be made here (" << cg.why_not() << ")");
    return;
  }
  // The cgroup as /proc/PID/cgroup's cgroup2 line names it: the part of the path below the mount.
  const std::string name = cg.path().substr(cg.path().rfind('/'));
  auto cgroup_of_child = [&](int dir_fd) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    SpawnOptions o;
    o.program = "cat";
    o.argv = {"cat", "/proc/self/cgroup"};
    o.env = {"PATH=/usr/bin:/bin"};
    o.stdout_fd = fds[1];
    o.cgroup_procs_fd = cg.procs_fd();
    o.cgroup_dir_fd = dir_fd;
    const pid_t pid = spawn(o);
    ::close(fds[1]);
    std::string out;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return out;
  };
  CHECK(cgroup_of_child(cg.dir_fd()).find(name + "\n") != std::string::npos);  // created in it (clone3)
  CHECK(cgroup_of_child(-1).find(name + "\n") != std::string::npos);           // forked, then moved in
  CHECK(cg.end() == 0);
}
