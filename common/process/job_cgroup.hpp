// The job's own cgroup (v2), where ddprun can make one: the kernel's way to end a set of processes that
// nothing else can find. A helper that left its worker's process group *and* built a new environment
// (`setsid env -i`, Python's Popen(env=..., start_new_session=True), sudo's env_reset) or overwrote its
// environment block (setproctitle: gunicorn, Celery, Ray) carries neither the job tag nor a watched group,
// but it cannot leave a cgroup without write access to cgroup files outside the job. `cgroup.kill` (Linux
// 5.14) SIGKILLs every process of the cgroup and its sub-cgroups at once, forks in flight included: the
// mechanism SLURM's and systemd's own teardown trusts.
//
// Where: a child of the cgroup ddprun itself is in (`ddprun-<tag>`), on the cgroup2 mount (the unified
// hierarchy; in hybrid set-ups /sys/fs/cgroup/unified). That works as root and in a delegated subtree (a
// systemd user slice with Delegate=yes); elsewhere (SLURM tasks as a user, a read-only /sys/fs/cgroup in a
// container) `create` says why not and the job guard's tag scan and group kill are the whole cover. Only
// the workers are moved in (spawn writes "0" to cgroup.procs in the child): ddprun and its guard stay
// outside, so ending the cgroup never ends the supervisor. No controller is enabled, so no limit applies
// and cgroup v2's "no processes in inner nodes" rule never bites. A ddprun run inside a worker makes its
// cgroup inside the outer job's: the outer kill ends the inner job too.
//
// Boost-free and allocation-light (the guard calls kill_cgroup_tree after ddprun's death).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun::process {

class JobCgroup {
 public:
  JobCgroup() = default;
  JobCgroup(JobCgroup&& other) noexcept;
  JobCgroup& operator=(JobCgroup&& other) noexcept;
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;
  ~JobCgroup();  // closes the descriptor only: ending the cgroup is end()'s job (or the guard's)

  // Makes `ddprun-<name>` inside ddprun's own cgroup. Inactive (why_not() says why) when there
  // is no cgroup2 mount, DDPRUN_NO_CGROUP=1 is set, or the directory cannot be made.
  static JobCgroup create(const std::string& name);

  bool active() const { return procs_fd_ >= 0; }
  const std::string& path() const { return path_; }
  const std::string& why_not() const { return why_not_; }
  // cgroup.procs opened for writing: a forked child writes "0" to it to move itself in (spawn).
  int procs_fd() const { return procs_fd_; }
  // The cgroup's directory: spawn creates the child in it at once (clone3's CLONE_INTO_CGROUP), where the kernel
  // can, instead of moving it (a move waits for an RCU grace period: ~20 ms for a job's first worker).
  int dir_fd() const { return dir_fd_; }

  // Kills whatever is still inside and removes the cgroup (the job ended normally: usually nothing is).
  // Returns the number of processes that were still there.
  int end();

 private:
  std::string path_;
  std::string why_not_;
  int procs_fd_ = -1;
  int dir_fd_ = -1;
};

// The kernel's count of OOM kills in the memory cgroup the workers are charged to, and the memory limit over
// them: what tells a worker's SIGKILL from the OOM killer apart from anyone else's (a user's kill -9, a
// scheduler). Read before and after, not parsed from the kernel log. On cgroup v2, the nearest of the job's
// cgroup (or ddprun's own) and its ancestors with the memory controller: memory.events' oom_kill, which
// counts the kills below it too. On cgroup v1, the memory controller's cgroup of ddprun, which the workers
// inherit: memory.oom_control's oom_kill (Linux 4.13). The count is per cgroup, not per process: a kill of
// another process charged there at the same moment would read the same.
class OomKillCounter {
 public:
  // Inactive (kills() is -1) where neither exists.
  static OomKillCounter locate(const std::string& job_cgroup);
  // For tests: the counter in `counter_file` ("oom_kill N" among its lines), the limits in the files named
  // `limit_name` of `dir` and its parents up to `top`.
  OomKillCounter(std::string counter_file, std::string dir, std::string top, std::string limit_name);
  OomKillCounter() = default;

  bool active() const { return !counter_file_.empty(); }
  long long kills() const;
  // One clause on the memory limit that applied: "memory limit 64.0 MiB, set by memory.max of
  // /sys/fs/cgroup/x", or, with none set, "no cgroup memory limit, so the machine's 23.5 GiB ran out".
  std::string limit() const;

 private:
  std::string counter_file_;
  std::string dir_;         // the cgroup whose counter it is
  std::string top_;         // the hierarchy's mount point: limits are looked for up to it
  std::string limit_name_;  // memory.max (v2) or memory.limit_in_bytes (v1)
};

// Kills every process in the cgroup at `path` and its sub-cgroups (cgroup.kill, or one by one from
// cgroup.procs on kernels before 5.14), waits until they are gone (at most ~2 s) and removes the
// directories, deepest first. Returns the number of processes found inside. Safe after fork in a
// multi-threaded process only as far as glibc's malloc is (the guard is such a child).
int kill_cgroup_tree(const std::string& path);

// Pids in the cgroup at `path` and its sub-cgroups (empty when it does not exist).
std::vector<pid_t> cgroup_tree_pids(const std::string& path);

}  // namespace ddprun::process
