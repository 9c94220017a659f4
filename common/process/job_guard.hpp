// The job guard: a small process outside the supervisor's tree that ends the job when the supervisor dies
// without cleaning up (SIGKILL from a user, a scheduler or the OOM killer).
//
// Why it is needed: PR_SET_PDEATHSIG reaches only the supervisor's direct children (the workers), and once
// the supervisor is gone its subreaper role is gone too: the workers' children, `setsid` helpers and
// double-forked daemons are re-parented elsewhere and nobody knows they belong to the job.
//
// How it finds the job's processes with no privilege and no cgroup: every worker carries a random tag in
// its environment (DDPRUN_JOB_TAG), which every descendant inherits unless it builds a new environment
// from scratch. On the supervisor's death the guard SIGKILLs every process whose /proc/PID/environ holds the
// tag, and the whole process group of every worker it was told about in which such a process remains (that
// also covers group members that replaced their environment). It repeats until a scan finds nothing (a
// process forking meanwhile is caught by the next scan), then removes the temporary run directory.
//
// The guard learns of the supervisor's death by end of file on a pipe whose only write end the supervisor
// holds (close-on-exec: no worker keeps it open). It is started by a double fork, so it is never the
// supervisor's child: the supervisor's waitpid(-1) and descendant sweeps never see it.
#pragma once

#include <sys/types.h>

#include <string>

namespace ddprun::process {

inline constexpr const char* kJobTagVariable = "DDPRUN_JOB_TAG";

class JobGuard {
 public:
  JobGuard() = default;
  JobGuard(JobGuard&& other) noexcept;
  JobGuard& operator=(JobGuard&& other) noexcept;
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;
  ~JobGuard();  // without dismiss(): the guard ends the job, as if this process had been SIGKILLed

  // Starts a guard with a fresh random tag. Call before any worker starts and while single-threaded (it
  // forks), and before the caller becomes a child subreaper (the guard must be re-parented away from it).
  // Throws std::system_error when fork or pipe fails.
  static JobGuard start();

  bool active() const { return command_fd_ >= 0; }
  const std::string& tag() const { return tag_; }
  // "DDPRUN_JOB_TAG=<tag>", for a worker's environment.
  std::string tag_assignment() const;

  // A worker's process group, to kill as a whole if the supervisor dies.
  void watch_group(pid_t pgid);
  // A directory (the temporary run directory) to remove after the kill.
  void remove_on_death(const std::string& dir);

  // The supervisor ends normally: the guard exits without touching anything, and this returns once it
  // has (at most ~1 s), so no process of ddprun's outlives it.
  void dismiss();

 private:
  void send(const std::string& line);

  int command_fd_ = -1;  // write end: the guard reads commands, and end of file without "Q" means death
  int exit_fd_ = -1;     // the guard's pid, then end of file when it exits; dismiss() swaps in a pidfd
  std::string tag_;
};

// The guard's own body, exposed for tests: reads commands from `command_fd` until "Q" (returns 0) or end
// of file (kills the job tagged `tag` as described above, returns the number of processes killed).
int run_guard(int command_fd, const std::string& tag, pid_t supervisor);

}  // namespace ddprun::process
