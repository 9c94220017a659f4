// Finding and killing everything a supervisor started, including descendants that left the worker's
// process group (setsid, double fork). With PR_SET_CHILD_SUBREAPER such orphans are re-parented to the
// supervisor instead of init, so they stay visible as descendants and are reaped by its waitpid(-1).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::process {

// prctl(PR_SET_CHILD_SUBREAPER, 1). Throws std::system_error on failure.
void become_child_subreaper();

// Every live process whose parent chain leads to `root` (root excluded), read from /proc, deepest last.
// Zombies are included (they still need reaping). A snapshot: processes may come and go meanwhile.
std::vector<pid_t> descendants_of(pid_t root);

// Fields of /proc/<pid_dir>/stat a supervisor needs. False when the process is gone (or unreadable).
struct ProcStat {
  char state = 0;  // R, S, D, T, Z, ...
  pid_t ppid = 0;
  pid_t pgid = 0;
};
bool read_proc_stat(const char* pid_dir, ProcStat& out);

// Sends `signal` to process group `pgid`. Returns true if the group still had members (ESRCH → false).
bool signal_group(pid_t pgid, int signal);

// Sends `signal` to each pid, ignoring those already gone.
void signal_each(const std::vector<pid_t>& pids, int signal);

// Sends `signal` to each group of `groups` (the workers still running: a reaped worker's group id may be
// reused) and, with `include_descendants`, to every descendant of this process outside the groups signalled
// (one that called setsid, or outlived its worker). `wake`: each gets SIGCONT after it, so a stopped process
// (SIGSTOP, Ctrl-Z, a debugger) acts on the signal.
void signal_groups_and_strays(const std::vector<pid_t>& groups, int signal, bool include_descendants, bool wake);

// Where this process's environment block lies in its memory (what /proc/self/environ shows: env_start
// and env_end of /proc/self/stat). False when the kernel does not say (before Linux 3.5).
bool own_environment_block(std::uintptr_t& start, std::uintptr_t& end);

// The contents of a small file (a /proc or cgroup file), at most `limit` bytes; "" when it cannot be read.
std::string read_file(const std::string& path, std::size_t limit = 1 << 20);

}  // namespace ddprun::process
