#include "agent/job_containment.hpp"

#include <unistd.h>

#include <system_error>

namespace ddprun::agent {
namespace asio = boost::asio;

JobContainment::JobContainment(asio::io_context& io, Logger& log) : log_(log), guard_watch_(io) {}

void JobContainment::start(const std::string& work_root) {
  // The cgroup is named after the guard's tag and told to it before any worker exists; the guard itself stays
  // outside it, beside ddprun.
  guard_ = process::JobGuard::start();
  guard_.remove_on_death(work_root);  // the whole tree without --log-dir
  cgroup_ = process::JobCgroup::create(guard_.tag());
  oom_counter_ = process::OomKillCounter::locate(cgroup_.active() ? cgroup_.path() : std::string());
  log_.debug(oom_counter_.active()
                 ? "OOM kills counted: " + std::to_string(oom_counter_.kills()) + ", " + oom_counter_.limit()
                 : std::string("no memory cgroup: an OOM kill reads as a plain SIGKILL"));
  if (cgroup_.active()) {
    guard_.kill_cgroup_on_death(cgroup_.path());
    log_.debug("job cgroup: ", cgroup_.path());
  } else {
    log_.debug("no job cgroup (", cgroup_.why_not(), "): the job guard's tag scan and group kill cover the job");
  }
}

void JobContainment::watch() {
  const int fd = ::dup(guard_.watch_fd());
  if (fd < 0) return;
  guard_watch_.assign(fd);
  guard_watch_.async_wait(asio::posix::descriptor_base::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    if (guard_.on_watch_readable()) {
      guard_watch_.close();
      watch();  // its pid came: wait for its end
      return;
    }
    on_guard_gone();
  });
}

// The guard was killed (by hand, `pkill -9 -f ddprun`, the OOM killer): the job runs on, but a SIGKILL of
// ddprun now would leave it behind. Another guard with the same tag takes over at once.
void JobContainment::on_guard_gone() {
  guard_watch_.close();
  const pid_t old = guard_.pid();
  try {
    guard_.restart();
    log_.warning("the job guard (pid ", old, ") is gone: started a new one");
    watch();
  } catch (const std::system_error& e) {
    log_.warning("the job guard (pid ", old, ") is gone and no new one could be started (", e.what(),
                 "): if ddprun is SIGKILLed now, the job's processes are left behind");
  }
}

void JobContainment::stop_watching() {
  stopped_ = true;
  guard_watch_.close();
}

int JobContainment::end_cgroup() {
  stop_watching();
  return cgroup_.end();
}

std::string JobContainment::oom_kill_reason() {
  if (!oom_.explains(oom_counter_.kills())) return {};
  return "killed by the kernel's OOM killer: " + oom_counter_.limit();
}

}  // namespace ddprun::agent
