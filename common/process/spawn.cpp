#include "common/process/spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <system_error>

namespace ddprun::process {
namespace {

// Everything the child needs, prepared before fork: after fork only async-signal-safe calls are allowed.
struct ChildPlan {
  std::vector<std::vector<char>> storage;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<std::string> candidates;  // paths to try, in order (PATH search done here, not in the child)
  std::vector<const char*> candidate_ptrs;
};

char* hold(ChildPlan& plan, const std::string& s) {
  plan.storage.emplace_back(s.begin(), s.end());
  plan.storage.back().push_back('\0');
  return plan.storage.back().data();
}

// Where execvp would look for `name`: itself if it holds a '/', else each PATH entry ("" meaning ".").
std::vector<std::string> path_candidates(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return {name};
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= path_env.size()) {
    std::size_t end = path_env.find(':', start);
    if (end == std::string::npos) end = path_env.size();
    const std::string dir = path_env.substr(start, end - start);
    out.push_back((dir.empty() ? std::string(".") : dir) + "/" + name);
    start = end + 1;
  }
  return out;
}

[[noreturn]] void child_fail(int report_fd, int err) {
  // Best effort: the parent treats a short read as "exec failed with unknown error".
  ssize_t ignored = ::write(report_fd, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

sigset_t g_ignored_at_start;  // empty until remember_inherited_ignores()
bool g_ignores_known = false;

// "G <pid>\n" to the job guard, formatted by hand (no allocation, no stdio: async-signal-safe). One write of a
// few bytes to a pipe is atomic, so it never interleaves with ddprun's own lines. A guard that is gone gives
// EPIPE: ddprun ignores SIGPIPE, and so does the child until its dispositions are reset below.
void tell_guard_own_group(int guard_fd) {
  char line[32] = {'G', ' '};
  char digits[16];
  int n = 0;
  for (unsigned long v = static_cast<unsigned long>(::getpid()); v != 0 || n == 0; v /= 10)
    digits[n++] = static_cast<char>('0' + v % 10);
  std::size_t len = 2;
  while (n > 0) line[len++] = digits[--n];
  line[len++] = '\n';
  const ssize_t ignored = ::write(guard_fd, line, len);
  (void)ignored;
}

[[noreturn]] void run_child(const SpawnOptions& o, ChildPlan& plan, int report_fd, pid_t parent, bool in_cgroup) {
  if (o.cgroup_procs_fd >= 0 && !in_cgroup) {
    const ssize_t ignored = ::write(o.cgroup_procs_fd, "0", 1);  // "0": the writing process itself
    (void)ignored;
  }
  if (o.new_process_group && ::setpgid(0, 0) != 0) child_fail(report_fd, errno);
  if (o.new_process_group && o.guard_fd >= 0) tell_guard_own_group(o.guard_fd);
  if (o.parent_death_signal != 0) {
    if (::prctl(PR_SET_PDEATHSIG, o.parent_death_signal) != 0) child_fail(report_fd, errno);
    // The parent may have died before prctl took effect; then no signal will ever come.
    if (::getppid() != parent) ::_exit(128 + o.parent_death_signal);
  }
  // Default dispositions (exec keeps SIG_IGN, e.g. a SIGPIPE the parent ignores) and an empty mask
  // (the parent blocked everything around fork; a mask survives exec).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    if (g_ignores_known && sigismember(&g_ignored_at_start, sig) == 1) continue;  // nohup's SIGHUP stays ignored
    ::sigaction(sig, &dfl, nullptr);
  }
  // Still with every signal blocked (SIGTTOU included): a background group may take the terminal.
  if (o.take_terminal && o.stdin_fd >= 0 && ::tcsetpgrp(o.stdin_fd, ::getpgrp()) != 0) child_fail(report_fd, errno);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  int in = o.stdin_fd;
  if (in < 0) {
    in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0) child_fail(report_fd, errno);
  }
  // dup2 clears close-on-exec on the new descriptor; an fd already at its place needs it cleared by hand.
  auto place = [&](int from, int to) {
    if (from < 0) return;
    if (from == to) {
      ::fcntl(to, F_SETFD, 0);
    } else if (::dup2(from, to) < 0) {
      child_fail(report_fd, errno);
    }
  };
  place(in, 0);
  place(o.stdout_fd, 1);
  place(o.stderr_fd, 2);
  // Every inherited descriptor above stderr becomes close-on-exec (the report pipe already is), except
  // those asked for. close_range exists since Linux 5.9; on older kernels the parent's fds are CLOEXEC.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  for (int fd : o.inherit_fds) ::fcntl(fd, F_SETFD, 0);

  if (!o.working_dir.empty() && ::chdir(o.working_dir.c_str()) != 0) child_fail(report_fd, errno);

  int err = ENOENT;
  for (const char* path : plan.candidate_ptrs) {
    ::execve(path, plan.argv.data(), plan.envp.data());
    // Like execvp: remember EACCES but keep searching; other errors are final.
    if (errno == EACCES) err = EACCES;
    else if (errno != ENOENT && errno != ENOTDIR) { err = errno; break; }
  }
  child_fail(report_fd, err);
}

// clone3 refused CLONE_INTO_CGROUP once (an old kernel, a cgroup v1 descriptor): every later child is forked.
bool g_clone_into_cgroup_refused = false;

// A child created inside the cgroup of `cgroup_dir_fd`, like fork otherwise (same return values). -1 with
// errno when the kernel cannot do it; g_clone_into_cgroup_refused then says not to try again. The child runs
// only async-signal-safe code until exec (run_child), as after fork: glibc's fork bookkeeping is not needed.
pid_t fork_into_cgroup(int cgroup_dir_fd) {
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(cgroup_dir_fd);
  const long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0 && (errno == ENOSYS || errno == EINVAL || errno == E2BIG || errno == EOPNOTSUPP || errno == EBADF))
    g_clone_into_cgroup_refused = true;
  return static_cast<pid_t>(pid);
}

}  // namespace

void remember_inherited_ignores() {
  sigemptyset(&g_ignored_at_start);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGPIPE || sig == SIGCHLD) continue;
    // The stop signals a user sends on purpose are handled whatever was inherited, as torchrun does (it sets
    // its own handlers for them): a script's `ddprun ... &` inherits SIGINT and SIGQUIT ignored, and such a
    // ddprun ran to its end through Ctrl-C and `kill -INT` (issue 54; torchrun stopped in 1.7 s). SIGHUP is
    // not: nohup's ignored SIGHUP is a request to outlive the terminal.
    if (sig == SIGINT || sig == SIGQUIT || sig == SIGTERM) continue;
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) sigaddset(&g_ignored_at_start, sig);
  }
  g_ignores_known = true;
}

bool ignored_at_start(int signal) { return g_ignores_known && sigismember(&g_ignored_at_start, signal) == 1; }

namespace {
// execve says ENOENT both for a file that is not there and for one whose interpreter is not: the kernel
// looks up the '#!' line's program too. Said plainly, as the shell's "bad interpreter" does.
std::string missing_interpreter_note(const std::string& program, int err) {
  if (err != ENOENT || program.find('/') == std::string::npos) return {};
  // O_NONBLOCK: this runs on the agent's loop, and a FIFO put at the path since the exec must not hold it.
  const int fd = ::open(program.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return {};
  char head[256];
  const ssize_t n = ::read(fd, head, sizeof head);
  ::close(fd);
  if (n < 3 || head[0] != '#' || head[1] != '!') return " (the file exists: the loader it needs is missing)";
  std::string line(head + 2, static_cast<std::size_t>(n) - 2);
  line = line.substr(0, line.find('\n'));
  const std::size_t start = line.find_first_not_of(" \t");
  line = start == std::string::npos ? std::string() : line.substr(start);
  return " (the file exists: its interpreter '" + line.substr(0, line.find_first_of(" \t")) + "', named on its '#!' "
         "line, does not)";
}
}  // namespace

ExecError::ExecError(const std::string& program, int err)
    : std::runtime_error("cannot execute '" + program + "': " + std::strerror(err) +
                         missing_interpreter_note(program, err)),
      err_(err) {}

int ExecError::exit_code() const noexcept { return (err_ == ENOENT || err_ == ENOTDIR) ? 127 : 126; }

bool reclaim_terminal(int fd) {
  sigset_t ttou, old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  ::pthread_sigmask(SIG_BLOCK, &ttou, &old);
  const bool ok = ::tcsetpgrp(fd, ::getpgrp()) == 0;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

std::string path_of(const std::vector<std::string>& env) {
  for (const auto& kv : env)
    if (kv.rfind("PATH=", 0) == 0) return kv.substr(5);
  return "/usr/local/bin:/usr/bin:/bin";
}

bool regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

ResolvedProgram resolve_program(const std::string& name, const std::string& path_env) {
  auto check = [](const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return ProgramCheck::kNotFound;
    if (S_ISDIR(st.st_mode)) return ProgramCheck::kIsDirectory;
    if (::access(path.c_str(), X_OK) != 0 || !S_ISREG(st.st_mode)) return ProgramCheck::kNotExecutable;
    return ProgramCheck::kOk;
  };
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return {check(name), name};
  ResolvedProgram best;  // the first non-executable match is reported if nothing better is found
  for (const std::string& candidate : path_candidates(name, path_env)) {
    ProgramCheck c = check(candidate);
    if (c == ProgramCheck::kOk) return {c, candidate};
    if (c == ProgramCheck::kNotExecutable && best.check == ProgramCheck::kNotFound) best = {c, candidate};
  }
  return best;
}

StartedChild spawn_start(const SpawnOptions& o) {
  ChildPlan plan;
  for (const auto& a : o.argv) plan.argv.push_back(hold(plan, a));
  plan.argv.push_back(nullptr);
  for (const auto& e : o.env) plan.envp.push_back(hold(plan, e));
  plan.envp.push_back(nullptr);
  plan.candidates = path_candidates(o.program, path_of(o.env));
  for (const auto& c : plan.candidates) plan.candidate_ptrs.push_back(c.c_str());

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");

  // Block every signal across fork: a handler of the parent's must not run in the child before exec.
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t parent = ::getpid();
  bool in_cgroup = false;
  pid_t pid = -1;
  if (o.cgroup_dir_fd >= 0 && !g_clone_into_cgroup_refused) {
    pid = fork_into_cgroup(o.cgroup_dir_fd);
    in_cgroup = pid >= 0;
  }
  if (!in_cgroup) pid = ::fork();  // no cgroup, or the kernel would not create the child in it: it moves itself
  if (pid == 0) {
    ::close(report[0]);
    run_child(o, plan, report[1], parent, in_cgroup);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    throw std::system_error(fork_errno, std::generic_category(), "fork");
  }
  // Also from the parent, so that a kill of the group right after spawn returns cannot miss the child.
  if (o.new_process_group) ::setpgid(pid, pid);
  return StartedChild{pid, report[0], o.program};
}

pid_t spawn_finish(StartedChild& child) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(child.report_fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(child.report_fd);
  child.report_fd = -1;
  if (n > 0) {
    // The child has _exit'ed (or is about to): reap it here so no zombie is left for the caller.
    int status;
    while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw ExecError(child.program, n == static_cast<ssize_t>(sizeof child_errno) ? child_errno : EIO);
  }
  return child.pid;
}

pid_t spawn(const SpawnOptions& o) {
  StartedChild child = spawn_start(o);
  return spawn_finish(child);
}

}  // namespace ddprun::process
