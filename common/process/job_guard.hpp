// The job guard: a small process outside the supervisor's tree that ends the job when the supervisor dies
// without cleaning up (SIGKILL from a user, a scheduler or the OOM killer).
//
// Why it is needed: PR_SET_PDEATHSIG reaches only the supervisor's direct children (the workers), and once
// the supervisor is gone its subreaper role is gone too: the workers' children, `setsid` helpers and
// double-forked daemons are re-parented elsewhere and nobody knows they belong to the job.
//
// How it finds the job's processes, three covers (docs/DESIGN-NOTES.md "what covers what"):
//   - the job's cgroup (common/process/job_cgroup.hpp), where ddprun could make one: cgroup.kill ends
//     every process in it, whatever it did to its group, session or environment;
//   - every process group of a worker it was told about, killed whether or not a tagged process remains
//     in it (members that replaced their environment: `env -i`); ddprun withdraws a group once it is
//     empty, since its id may then be reused by an unrelated process;
//   - every process whose environment holds the job's tag: each worker gets DDPRUN_JOB_TAG and the list
//     DDPRUN_JOB_TAGS of its own and every enclosing job's tag, which every descendant inherits unless it
//     builds a new environment. A ddprun run inside a worker (a sweep driver) thus has its workers tagged
//     for the outer job as well, and the inner guard wipes the inherited tags from its own environment
//     block, so it survives the outer kill long enough to remove the inner run directory.
// It repeats the scan until it finds nothing (a process forking meanwhile is caught by the next one),
// lets nested guards in the cgroup finish (bounded), kills the cgroup, then removes the run directory.
//
// The guard learns of the supervisor's death by end of file on a pipe whose only write end the supervisor
// holds (close-on-exec: no worker keeps it open). It is started by a double fork, so it is never the
// supervisor's child: the supervisor's waitpid(-1) and descendant sweeps never see it. The supervisor
// learns of the guard's death the same way (watch_fd) and starts another with the same tag (restart).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun::process {

inline constexpr const char* kJobTagVariable = "DDPRUN_JOB_TAG";
inline constexpr const char* kJobTagsVariable = "DDPRUN_JOB_TAGS";  // comma-separated: enclosing jobs', then own

class JobGuard {
 public:
  JobGuard() = default;
  JobGuard(JobGuard&& other) noexcept;
  JobGuard& operator=(JobGuard&& other) noexcept;
  JobGuard(const JobGuard&) = delete;
  JobGuard& operator=(const JobGuard&) = delete;
  ~JobGuard();  // without dismiss(): the guard ends the job, as if this process had been SIGKILLed

  // Starts a guard with a fresh random tag. Call before any worker starts and before other threads exist:
  // the guard allocates after the fork (glibc's malloc is fork-safe, ASan's is not). restart() forks with
  // ddprun's console threads running, which is safe with glibc.
  // Throws std::system_error when fork or pipe fails.
  static JobGuard start();

  bool active() const { return command_fd_ >= 0; }
  // Where a worker, between fork and exec, tells the guard its own group (spawn.hpp's guard_fd); -1: no guard.
  int command_fd() const { return command_fd_; }
  const std::string& tag() const { return tag_; }
  // "DDPRUN_JOB_TAG=<tag>", for a worker's environment.
  std::string tag_assignment() const;

  // A worker's process group, to kill as a whole if the supervisor dies; forget it once it is empty.
  void watch_group(pid_t pgid);
  void forget_group(pid_t pgid);
  void forget_empty_groups();  // every watched group that no process is in any more
  // A directory (the temporary run directory) to remove after the kill.
  void remove_on_death(const std::string& dir);
  // The job's cgroup (JobCgroup::path), to kill as a whole and remove.
  void kill_cgroup_on_death(const std::string& path);

  // Readable when the guard has something to say: its pid first, then end of file when it exits. Call
  // on_watch_readable() then: false means the guard is gone (killed by hand, `pkill -9 -f ddprun`).
  int watch_fd() const { return exit_fd_; }
  bool on_watch_readable();
  pid_t pid() const { return pid_; }
  // Starts a new guard with the same tag (the workers carry it) and tells it everything the old one knew.
  // Safe in a child subreaper (the flag is cleared around the double fork) and with threads running (the
  // guard calls nothing glibc does not make safe after fork). Throws std::system_error.
  void restart();

  // The supervisor ends normally: the guard exits without touching anything, and this returns once it
  // has (at most ~1 s), so no process of ddprun's outlives it.
  void dismiss();

 private:
  void launch();
  void tell(const std::string& line);  // sent now, and again to a restarted guard
  void send(const std::string& line);

  int command_fd_ = -1;  // write end: the guard reads commands, and end of file without "Q" means death
  int exit_fd_ = -1;     // the guard's pid, then end of file when it exits; dismiss() swaps in a pidfd
  pid_t pid_ = -1;       // once read from exit_fd_
  std::string tag_;
  std::vector<std::string> told_;  // every command but "Q", in order, for a restarted guard
};

// The guard's own body, exposed for tests: reads commands from `command_fd` until "Q" (returns 0) or end
// of file (kills the job tagged `tag` as described above, returns the number of processes killed).
// Commands: "G pgid" / "U pgid" (watch / forget a group), "D dir", "C cgroup-path", "Q".
int run_guard(int command_fd, const std::string& tag, pid_t supervisor);

}  // namespace ddprun::process
