// Starting a worker process the way a supervisor needs it, with nothing but libc.
//
// Used by the agent (on its Asio loop) and by the worker SDK's embedded spawn, so it must not depend on
// Boost or LibTorch. What `spawn` guarantees about the child, in the order it happens between fork and exec:
//   0. into the job's cgroup when given one (before anything else runs, so every descendant is inside);
//   1. its own process group (setpgid in child *and* parent: whichever runs first wins the race for kill);
//   2. PR_SET_PDEATHSIG(parent_death_signal), then a getppid() check: if the parent already died between
//      fork and prctl, the child exits instead of running unsupervised;
//   3. every signal disposition back to default and an empty signal mask: the parent blocks all signals
//      around fork so that its handlers (Asio's self-pipe) can never run in the child;
//   4. stdin/stdout/stderr from the given fds (stdin defaults to /dev/null), every other fd close-on-exec;
//   5. execve; if that fails the child reports errno through a close-on-exec pipe and _exit(127), so the
//      parent gets an ExecError (126/127 semantics) instead of a mysterious exit code.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun::process {

struct SpawnOptions {
  std::string program;                 // a path, or a bare name looked up in PATH of `env` (like execvp)
  std::vector<std::string> argv;       // argv[0] included
  std::vector<std::string> env;        // the child's entire environment, "NAME=value"
  int stdin_fd = -1;                   // -1: /dev/null
  // Make the child's process group the foreground group of the terminal on stdin_fd (which must be one), as
  // a shell does for the job it runs: a worker in a group of its own could not read the terminal
  // otherwise (SIGTTIN). Done in the child before its signal mask is emptied, so SIGTTOU cannot stop it.
  bool take_terminal = false;
  int stdout_fd = -1;                  // -1: inherit the parent's
  int stderr_fd = -1;                  // -1: inherit the parent's
  std::vector<int> inherit_fds;        // extra fds the child keeps under the same numbers
  bool new_process_group = true;
  int parent_death_signal = SIGKILL;   // 0: none
  std::string working_dir;             // empty: the parent's
  // cgroup.procs of the job's cgroup (common/process/job_cgroup.hpp), -1: none. Best effort: a child
  // that cannot move in still runs, covered by the job guard's other means.
  int cgroup_procs_fd = -1;
  // That cgroup's directory, -1: none. The child is then created inside it (clone3 with CLONE_INTO_CGROUP,
  // Linux 5.7), so it never has to move: a move takes the cgroup threadgroup lock for writing, which waits for
  // an RCU grace period (~20 ms for a job's first worker on the project's VM; issue 35's launch profile). Where
  // the kernel refuses that, the child is forked and moves itself in through cgroup_procs_fd, as before.
  int cgroup_dir_fd = -1;
  // The job guard's command pipe (job_guard.hpp), -1: none. With new_process_group, the child writes
  // "G <its pid>" there before exec: the guard watches the worker's group before any of the program runs, so a
  // helper that drops its environment at once still dies with a SIGKILLed ddprun. (The parent tells the guard
  // too, but only once every worker of the round has started: a SIGKILL in between left such a helper behind.)
  int guard_fd = -1;
};

// exec failed in the child (the child has already exited; it is reaped before this is thrown).
class ExecError : public std::runtime_error {
 public:
  ExecError(const std::string& program, int err);
  int error_number() const noexcept { return err_; }
  // 127 when the program was not found, 126 when it exists but cannot be executed (as a shell does).
  int exit_code() const noexcept;

 private:
  int err_;
};

// Notes which signals this process inherited ignored (nohup's SIGHUP, `trap '' USR1`): call first thing in
// main. Those stay ignored, as in any program: the caller leaves them out of what it handles, and spawn keeps
// them ignored in every child (all other dispositions go back to the default; SIGPIPE and SIGCHLD always do).
// SIGINT, SIGQUIT and SIGTERM are never noted: they are always handled (a script's `cmd &` inherits SIGINT and
// SIGQUIT ignored; torchrun handles them all the same), and the workers get them at the default.
void remember_inherited_ignores();
bool ignored_at_start(int signal);

// Starts the child. Throws ExecError when exec fails, std::system_error when fork/pipe fail.
pid_t spawn(const SpawnOptions& options);

// The same in two halves, so that a supervisor can fork every worker before it waits for any exec: the children
// then exec side by side on every core instead of one after another (issue 35: 8 workers' launch). The child
// is running after spawn_start; spawn_finish waits until it has exec'd (or reports why not). Every started
// child must be finished.
struct StartedChild {
  pid_t pid = 0;
  int report_fd = -1;  // closed by spawn_finish
  std::string program;
};
// Throws std::system_error when fork/pipe fail (nothing is left started then).
StartedChild spawn_start(const SpawnOptions& options);
// Throws ExecError when exec failed (the child is reaped first).
pid_t spawn_finish(StartedChild& child);

// What a program name refers to, checked before anything is started so bad input starts no worker.
enum class ProgramCheck { kOk, kNotFound, kIsDirectory, kNotExecutable };
struct ResolvedProgram {
  ProgramCheck check = ProgramCheck::kNotFound;
  std::string path;  // the absolute or relative path that would be executed (when found)
};
// Looks `name` up as execvp would: a name containing '/' is used as is, otherwise each PATH entry is tried.
ResolvedProgram resolve_program(const std::string& name, const std::string& path_env);

// Whether `path` names a regular file (symbolic links followed): what may be read to learn about a program
// without blocking (a FIFO's open waits for a writer) or consuming it.
bool regular_file(const std::string& path);

// Makes this process's group the foreground group of the terminal on `fd` again (after a child took it
// with take_terminal), with SIGTTOU blocked meanwhile so a background caller is not stopped. Returns false
// when `fd` is not this process's controlling terminal or the call failed.
bool reclaim_terminal(int fd);

// Reads PATH from an environment vector ("NAME=value" entries); "/usr/local/bin:/usr/bin:/bin" if absent.
std::string path_of(const std::vector<std::string>& env);

}  // namespace ddprun::process
