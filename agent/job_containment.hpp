// What keeps a job's processes from outliving ddprun, as one component of the agent: the job guard (a process
// that ends the job if ddprun is SIGKILLed: common/process/job_guard.hpp), the workers' cgroup where one can be
// made (common/process/job_cgroup.hpp), the OOM kills counted there, and the watch that replaces a guard that
// dies. NodeAgent asks it for the guard's tag and the cgroup's descriptors when it plans a worker, tells it each
// worker's group, and asks it at a SIGKILL it did not send whether the OOM killer explains it.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <string>

#include "common/log.hpp"
#include "common/process/job_cgroup.hpp"
#include "common/process/job_guard.hpp"

namespace ddprun::agent {

// Which SIGKILLs the memory cgroup's OOM-kill count explains: each kill counted since the round began explains
// one death, in the order they are asked about. Pure, so the rule is tested on its own.
class OomAttribution {
 public:
  // The count at the round's start (-1: no counter).
  void on_round_start(long long kills) { seen_ = kills; }
  // A worker was SIGKILLed by someone else; `kills` is the count now. True when a kill not yet put on a
  // worker explains it (and it is now put on this one).
  bool explains(long long kills) {
    if (kills < 0 || seen_ < 0 || kills <= seen_) return false;
    ++seen_;
    return true;
  }

 private:
  long long seen_ = -1;
};

class JobContainment {
 public:
  JobContainment(boost::asio::io_context& io, Logger& log);

  // Forks the guard (before any thread of ddprun starts: a fork of a threaded process is unsafe under ASan),
  // which removes `work_root` should ddprun die; then the cgroup, named after the guard's tag, is made and told
  // to the guard. Throws what the guard's start throws.
  void start(const std::string& work_root);
  // On the loop: a guard that is gone is said at once and replaced.
  void watch();
  // The job is over here: no more watching (the guard stays until dismiss).
  void stop_watching();
  // The end of the job: no more watching, and anything the cgroup still holds is killed (returns how many).
  int end_cgroup();
  // Last: the guard goes without killing anything (the run's files were removed by then).
  void dismiss() { guard_.dismiss(); }

  const process::JobGuard& guard() const { return guard_; }
  const process::JobCgroup& cgroup() const { return cgroup_; }
  // A worker started, in its own process group (its leader): the guard kills the group should ddprun die.
  void watch_group(pid_t pgid) { guard_.watch_group(pgid); }
  // A worker ended: an empty group's id may be reused, and the guard must not kill it then.
  void forget_empty_groups() { guard_.forget_empty_groups(); }

  void on_round_start() { oom_.on_round_start(oom_counter_.kills()); }
  // A worker's SIGKILL that ddprun did not send: the OOM killer's reason when the count explains it, else empty.
  std::string oom_kill_reason();

 private:
  void on_guard_gone();

  Logger& log_;
  process::JobGuard guard_;
  process::JobCgroup cgroup_;
  process::OomKillCounter oom_counter_;  // the OOM kills in the workers' memory cgroup
  OomAttribution oom_;
  boost::asio::posix::stream_descriptor guard_watch_;  // says when the guard is gone
  bool stopped_ = false;
};

}  // namespace ddprun::agent
