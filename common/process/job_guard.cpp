#include "common/process/job_guard.hpp"

#include "common/process/job_cgroup.hpp"
#include "common/process/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace ddprun::process {
namespace {

std::string random_tag() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<std::size_t>(n);
  }
  static const char hex[] = "0123456789abcdef";
  std::string tag;
  for (unsigned char b : bytes) {
    tag += hex[b >> 4];
    tag += hex[b & 15];
  }
  return tag;
}

// Closes every descriptor but 0, 1, 2 and `keep` (the guard does not exec, so it would otherwise hold
// whatever the supervisor had open: sockets, pipes whose end of file others wait for).
void close_all_except(std::vector<int> keep) {
  keep.push_back(2);
  std::sort(keep.begin(), keep.end());
  int from = 3;
  for (int fd : keep) {
    if (fd < from) continue;
    if (fd > from) ::syscall(SYS_close_range, static_cast<unsigned>(from), static_cast<unsigned>(fd - 1), 0U);
    from = fd + 1;
  }
  ::syscall(SYS_close_range, static_cast<unsigned>(from), ~0U, 0U);
}

// Whether a NUL-separated environment block holds exactly the entry `needle` ("NAME=value").
bool has_entry(const std::string& block, const std::string& needle) {
  for (std::size_t at = block.find(needle); at != std::string::npos; at = block.find(needle, at + 1)) {
    const bool starts = at == 0 || block[at - 1] == '\0';
    const std::size_t end = at + needle.size();
    if (starts && (end == block.size() || block[end] == '\0')) return true;
  }
  return false;
}

// Whether the environment block carries the job: DDPRUN_JOB_TAG=<tag>, or <tag> in DDPRUN_JOB_TAGS' list.
bool carries_tag(const std::string& block, const std::string& tag) {
  if (has_entry(block, std::string(kJobTagVariable) + "=" + tag)) return true;
  const std::string name = std::string(kJobTagsVariable) + "=";
  for (std::size_t at = block.find(name); at != std::string::npos; at = block.find(name, at + 1)) {
    if (at != 0 && block[at - 1] != '\0') continue;
    const std::size_t begin = at + name.size();
    const std::size_t end = std::min(block.find('\0', begin), block.size());
    const std::string list = "," + block.substr(begin, end - begin) + ",";
    if (list.find("," + tag + ",") != std::string::npos) return true;
  }
  return false;
}

struct Tagged {
  pid_t pid;
  pid_t pgid;
};

// Every live process (zombies have no environment to read) carrying the job's tag.
std::vector<Tagged> find_tagged(const std::string& tag) {
  std::vector<Tagged> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  const pid_t self = ::getpid();
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid == self) continue;
    const std::string dir = entry->d_name;
    if (!carries_tag(read_file("/proc/" + dir + "/environ", 1 << 20), tag)) continue;
    ProcStat stat;
    out.push_back({pid, read_proc_stat(entry->d_name, stat) ? stat.pgid : -1});
  }
  ::closedir(proc);
  return out;
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  ::remove(path);
  return 0;
}

// A guard of a job nested in this one (a ddprun run by a worker) ends its own job and removes its run
// directory when its ddprun dies: let it finish before its cgroup, which holds it too, is killed.
void wait_for_nested_guards(const std::string& cgroup) {
  for (int waited_ms = 0; waited_ms < 2000; waited_ms += 5) {
    bool any = false;
    for (pid_t pid : cgroup_tree_pids(cgroup))
      any = any || read_file("/proc/" + std::to_string(pid) + "/comm", 64) == "ddprun-guard\n";
    if (!any) return;
    ::usleep(5000);
  }
}

int kill_job(const std::string& tag, const std::set<pid_t>& groups, const std::string& cgroup) {
  std::set<pid_t> killed;
  // Every group ddprun still watches, whoever is left in it: ddprun forgets a group once it is empty, so
  // the id cannot belong to anyone else yet (the kernel keeps a group's id while it has a member).
  for (pid_t pgid : groups)
    if (pgid > 1) ::killpg(pgid, SIGKILL);
  // A scan costs a few milliseconds; a process forked between two scans is found by the next one. The
  // bound only guards against a process that can never die (uninterruptible sleep on a dead device).
  for (int round = 0; round < 400; ++round) {
    const std::vector<Tagged> found = find_tagged(tag);
    if (found.empty()) break;
    for (const Tagged& t : found) {
      ::kill(t.pid, SIGKILL);
      killed.insert(t.pid);
      if (t.pgid > 1 && groups.count(t.pgid)) ::killpg(t.pgid, SIGKILL);
    }
    ::usleep(5000);
  }
  int count = static_cast<int>(killed.size());
  if (!cgroup.empty()) {
    wait_for_nested_guards(cgroup);
    count += kill_cgroup_tree(cgroup);
  }
  return count;
}

// A guard inherits the environment block of the ddprun it was forked from, and with it the tags of any
// job that ddprun runs in: the enclosing job's guard would kill it at once. The block is this process's
// own memory (what /proc/PID/environ shows): the tag variables are renamed in place.
void wipe_inherited_tags() {
  std::uintptr_t env_start = 0, env_end = 0;
  if (!own_environment_block(env_start, env_end)) return;
  char* block = reinterpret_cast<char*>(env_start);
  const std::size_t size = env_end - env_start;
  const std::string prefix = "DDPRUN_JOB_TAG";  // both variables
  for (std::size_t i = 0; i + prefix.size() <= size; ++i)
    if ((i == 0 || block[i - 1] == '\0') && std::memcmp(block + i, prefix.data(), prefix.size()) == 0) block[i] = 'x';
}

}  // namespace

int run_guard(int command_fd, const std::string& tag, pid_t supervisor) {
  std::set<pid_t> groups;
  std::string dir, cgroup;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(command_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end of file: the supervisor is gone without saying goodbye
    pending.append(buf, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      const std::string line = pending.substr(0, nl);
      if (line == "Q") return 0;
      if (line.rfind("G ", 0) == 0) groups.insert(static_cast<pid_t>(std::atoi(line.c_str() + 2)));
      if (line.rfind("U ", 0) == 0) groups.erase(static_cast<pid_t>(std::atoi(line.c_str() + 2)));
      if (line.rfind("D ", 0) == 0) dir = line.substr(2);
      if (line.rfind("C ", 0) == 0) cgroup = line.substr(2);
    }
  }
  const int killed = kill_job(tag, groups, cgroup);
  if (!dir.empty()) ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  char note[256];
  const int len = std::snprintf(note, sizeof note,
                                "ddprun-guard: ddprun (pid %d) died without ending its job: killed %d of its "
                                "processes%s\n",
                                static_cast<int>(supervisor), killed, dir.empty() ? "" : ", removed its run directory");
  if (len > 0) {
    const ssize_t ignored = ::write(2, note, static_cast<std::size_t>(std::min<int>(len, sizeof note - 1)));
    (void)ignored;
  }
  return killed;
}

JobGuard JobGuard::start() {
  JobGuard g;
  g.tag_ = random_tag();
  g.launch();
  return g;
}

void JobGuard::launch() {
  int command[2], exited[2];
  if (::pipe2(command, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  if (::pipe2(exited, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(command[0]);
    ::close(command[1]);
    throw std::system_error(err, std::generic_category(), "pipe2");
  }
  const pid_t supervisor = ::getpid();
  // In a child subreaper, the guard would be re-parented to us when the intermediate exits: the flag is
  // off for the few hundred microseconds of the double fork (an orphan of the job re-parented meanwhile
  // escapes ddprun's sweep, not the guard's tag scan, group kill or cgroup).
  int subreaper = 0;
  ::prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
  if (subreaper) ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  const pid_t child = ::fork();
  if (child < 0) {
    const int err = errno;
    if (subreaper) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    for (int fd : {command[0], command[1], exited[0], exited[1]}) ::close(fd);
    throw std::system_error(err, std::generic_category(), "fork (job guard)");
  }
  if (child == 0) {
    // The intermediate process: fork the guard and leave, so the guard is re-parented away from us.
    if (::fork() != 0) ::_exit(0);
    ::setsid();  // no controlling terminal: Ctrl-C and a closed terminal's SIGHUP are for the job, not us
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD})
      std::signal(sig, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_NAME, "ddprun-guard");
    wipe_inherited_tags();
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
    }
    close_all_except({command[0], exited[1]});
    const pid_t self = ::getpid();  // the supervisor watches this pid's end through a pidfd
    if (::write(exited[1], &self, sizeof self) != static_cast<ssize_t>(sizeof self)) ::_exit(1);
    run_guard(command[0], tag_, supervisor);
    ::_exit(0);  // exited[1] closes here: the supervisor's dismiss() sees end of file
  }
  ::close(command[0]);
  ::close(exited[1]);
  // The intermediate's exit must be waited for: once the caller becomes a child subreaper, a guard
  // orphaned later would be re-parented to it, become its child, and keep its "no child left" from ever
  // coming. The guard's own first breath is not waited for (a scheduling delay on every start): its pid
  // is read in on_watch_readable() or dismiss().
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (subreaper) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  command_fd_ = command[1];
  exit_fd_ = exited[0];
  pid_ = -1;
}

void JobGuard::restart() {
  if (command_fd_ >= 0) ::close(command_fd_);
  if (exit_fd_ >= 0) ::close(exit_fd_);
  command_fd_ = exit_fd_ = -1;
  launch();
  const std::vector<std::string> told = std::move(told_);
  told_.clear();
  for (const std::string& line : told) send(line);
}

bool JobGuard::on_watch_readable() {
  if (exit_fd_ < 0) return false;
  if (pid_ > 0) return false;  // after the pid, the only thing to read is end of file
  pid_t guard = -1;
  ssize_t n;
  while ((n = ::read(exit_fd_, &guard, sizeof guard)) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof guard) || guard <= 0) return false;
  pid_ = guard;
  return true;
}

JobGuard::JobGuard(JobGuard&& other) noexcept
    : command_fd_(std::exchange(other.command_fd_, -1)), exit_fd_(std::exchange(other.exit_fd_, -1)),
      pid_(std::exchange(other.pid_, -1)), tag_(std::move(other.tag_)), told_(std::move(other.told_)) {}

JobGuard& JobGuard::operator=(JobGuard&& other) noexcept {
  if (this != &other) {
    this->~JobGuard();
    command_fd_ = std::exchange(other.command_fd_, -1);
    exit_fd_ = std::exchange(other.exit_fd_, -1);
    pid_ = std::exchange(other.pid_, -1);
    tag_ = std::move(other.tag_);
    told_ = std::move(other.told_);
  }
  return *this;
}

// Not dismissed: ddprun is leaving by an unexpected path (an exception out of its loop), so the guard does
// what it would do on a SIGKILL and ends the job.
JobGuard::~JobGuard() {
  if (command_fd_ >= 0) ::close(command_fd_);
  if (exit_fd_ >= 0) ::close(exit_fd_);
}

std::string JobGuard::tag_assignment() const { return std::string(kJobTagVariable) + "=" + tag_; }

void JobGuard::tell(const std::string& line) {
  told_.push_back(line);
  send(line);
}

void JobGuard::send(const std::string& line) {
  if (command_fd_ < 0) return;
  const std::string msg = line + "\n";
  std::size_t done = 0;
  while (done < msg.size()) {
    const ssize_t n = ::write(command_fd_, msg.data() + done, msg.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the guard is gone (killed by hand): nothing more to tell it
    done += static_cast<std::size_t>(n);
  }
}

void JobGuard::watch_group(pid_t pgid) { tell("G " + std::to_string(pgid)); }

void JobGuard::forget_group(pid_t pgid) {
  const std::string watched = "G " + std::to_string(pgid);
  told_.erase(std::remove(told_.begin(), told_.end(), watched), told_.end());  // a restart need not know it
  send("U " + std::to_string(pgid));
}

void JobGuard::forget_empty_groups() {
  std::vector<pid_t> empty;
  for (const std::string& line : told_)
    if (line.rfind("G ", 0) == 0) {
      const pid_t pgid = static_cast<pid_t>(std::atoi(line.c_str() + 2));
      if (::killpg(pgid, 0) != 0 && errno == ESRCH) empty.push_back(pgid);
    }
  for (pid_t pgid : empty) forget_group(pgid);
}

void JobGuard::kill_cgroup_on_death(const std::string& path) {
  if (!path.empty() && path.find('\n') == std::string::npos) tell("C " + path);
}

void JobGuard::remove_on_death(const std::string& dir) {
  if (dir.find('\n') == std::string::npos) tell("D " + dir);
}

void JobGuard::dismiss() {
  if (command_fd_ < 0) return;
  send("Q");
  ::close(command_fd_);
  command_fd_ = -1;
  // The guard wrote its pid first thing (long ago by now). A pidfd for it becomes readable once it has
  // exited, even though it is not our child; the pipe's end of file comes a little earlier, while it is
  // still exiting, so it is only the fallback (no pidfds before Linux 5.3, or the guard already gone).
  if (pid_ <= 0) on_watch_readable();
  if (pid_ > 0) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd >= 0) {
      ::close(exit_fd_);
      exit_fd_ = pidfd;
    }
  }
  // Wait until the guard has exited, bounded: a guard stopped by hand must not hold ddprun's exit.
  pollfd p{exit_fd_, POLLIN, 0};
  for (int waited = 0; waited < 1000;) {
    const int r = ::poll(&p, 1, 50);
    if (r < 0 && errno != EINTR) break;
    if (r > 0) break;
    if (r == 0) waited += 50;
  }
  ::close(exit_fd_);
  exit_fd_ = -1;
}

}  // namespace ddprun::process
