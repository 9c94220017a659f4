// The signals to the job's processes and the grace period (agent/job_sweep.hpp), on real processes forked by
// the test: a stop reaches a worker's group and what it started outside the group; job control reaches only the
// running workers' groups; leftovers get one SIGTERM, then SIGKILL when the grace period is over, armed once.
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <csignal>

#include "agent/job_sweep.hpp"

using namespace ddprun::agent;
using namespace std::chrono_literals;

namespace {

struct Fixture {
  boost::asio::io_context io;
  SupervisionPolicy policy;
  AgentLifecycle lifecycle;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  int grace_over = 0;
  JobSweep sweep{io, 100ms, policy, lifecycle, log, [this] { ++grace_over; }};
};

// Waits for the byte a child writes once it is set up, so that no signal below races its set-up.
void await_ready(int fd) {
  char c;
  REQUIRE(::read(fd, &c, 1) == 1);
}

// A process of its own group that sleeps; with `ignore_term` it outlives SIGTERM.
pid_t worker(bool ignore_term = false) {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (ignore_term) ::signal(SIGTERM, SIG_IGN);
    (void)!::write(ready[1], "r", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  await_ready(ready[0]);
  ::close(ready[0]);
  return pid;
}

// A worker whose child left the group (setsid) and holds the write end of `fds[1]`: that end closes (EOF on
// fds[0]) when the child is gone. The child says it is ready through the same pipe.
pid_t worker_with_stray(int fds[2]) {
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::fork() == 0) {
      ::setsid();
      (void)!::write(fds[1], "r", 1);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  await_ready(fds[0]);
  return pid;
}

// The signal that ended `pid` (0: it did not end within 5 s).
int ended_by(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
    ::usleep(10'000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return 0;
}

bool closed_within_5s(int fd) {
  pollfd p{fd, POLLIN, 0};
  char c;
  const bool eof = ::poll(&p, 1, 5000) == 1 && ::read(fd, &c, 1) == 0;
  ::close(fd);
  return eof;
}

}  // namespace

TEST_CASE("a stop reaches each running worker's group and what it started outside the group") {
  Fixture f;
  int fds[2];
  const pid_t w = worker_with_stray(fds);
  f.policy.add_worker(0, 0, w, 0);
  CHECK(f.sweep.any_worker_running());
  f.sweep.signal_job(SIGTERM, /*include_descendants=*/true);
  CHECK(ended_by(w) == SIGTERM);
  CHECK(closed_within_5s(fds[0]));  // the stray (setsid: not in the worker's group) is gone too
}

TEST_CASE("Ctrl-Z and fg reach the running workers' groups, not a worker that ended") {
  Fixture f;
  const pid_t running = worker();
  const pid_t ended = worker();
  f.policy.add_worker(0, 0, running, 0);
  f.policy.add_worker(1, 1, ended, 0);
  ::kill(ended, SIGKILL);
  ::waitpid(ended, nullptr, 0);
  ddprun::process::ExitStatus killed;
  killed.signaled = true;
  killed.signal = SIGKILL;
  f.policy.on_exit(1, killed, 1);
  f.sweep.signal_worker_groups(SIGTSTP);
  int status = 0;
  REQUIRE(::waitpid(running, &status, WUNTRACED) == running);
  CHECK(WIFSTOPPED(status));
  f.sweep.signal_worker_groups(SIGCONT);
  REQUIRE(::waitpid(running, &status, WCONTINUED) == running);
  CHECK(WIFCONTINUED(status));
  ::kill(running, SIGKILL);
  ::waitpid(running, nullptr, 0);
}

TEST_CASE("leftovers after success get one SIGTERM, then SIGKILL once the grace period is over") {
  Fixture f;
  const pid_t leftover = worker(/*ignore_term=*/true);  // not a worker: something the job started
  const pid_t polite = worker();
  f.sweep.sweep_leftovers();
  CHECK(ended_by(polite) == SIGTERM);
  CHECK(f.lifecycle.cleanup() == AgentLifecycle::Cleanup::kGracePeriod);
  f.sweep.sweep_leftovers();  // a later batch: no second SIGTERM, no second grace period
  f.io.run_for(2s);
  CHECK(f.grace_over == 1);
  CHECK(f.lifecycle.cleanup() == AgentLifecycle::Cleanup::kKilling);
  CHECK(ended_by(leftover) == SIGKILL);
}

TEST_CASE("a cancelled grace period kills nothing") {
  Fixture f;
  const pid_t w = worker(/*ignore_term=*/true);
  f.sweep.arm_grace();
  f.sweep.cancel();
  f.io.run_for(300ms);
  CHECK(f.grace_over == 0);
  int status = 0;
  CHECK(::waitpid(w, &status, WNOHANG) == 0);  // still there
  ::kill(w, SIGKILL);
  ::waitpid(w, nullptr, 0);
}
