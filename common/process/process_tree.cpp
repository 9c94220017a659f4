#include "common/process/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <system_error>
#include <unordered_map>

namespace ddprun::process {

void become_child_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    throw std::system_error(errno, std::generic_category(), "prctl(PR_SET_CHILD_SUBREAPER)");
}

namespace {
// The command name (field 2) may contain spaces and ')' so the fields are read after the *last* ')':
// what follows starts with field 3 (state). nullptr when the text is no stat line.
const char* fields_after_command_name(const char* stat_text) {
  const char* close = std::strrchr(stat_text, ')');
  return close ? close + 1 : nullptr;
}
}  // namespace

bool read_proc_stat(const char* pid_dir, ProcStat& out) {
  const std::string path = std::string("/proc/") + pid_dir + "/stat";
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = fields_after_command_name(buf);
  if (!close) return false;
  int ppid = 0, pgid = 0;
  if (std::sscanf(close, " %c %d %d", &out.state, &ppid, &pgid) != 3) return false;
  out.ppid = ppid;
  out.pgid = pgid;
  return true;
}

std::vector<pid_t> descendants_of(pid_t root) {
  std::unordered_multimap<pid_t, pid_t> children;
  DIR* proc = ::opendir("/proc");
  if (!proc) return {};
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    ProcStat stat;
    if (read_proc_stat(entry->d_name, stat) && stat.ppid > 0)
      children.emplace(stat.ppid, static_cast<pid_t>(std::atoi(entry->d_name)));
  }
  ::closedir(proc);
  std::vector<pid_t> out;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    pid_t p = frontier.back();
    frontier.pop_back();
    auto range = children.equal_range(p);
    for (auto it = range.first; it != range.second; ++it) {
      out.push_back(it->second);
      frontier.push_back(it->second);
    }
  }
  return out;
}

bool signal_group(pid_t pgid, int signal) {
  if (pgid <= 1) return false;  // never signal init's or our caller's whole session by mistake
  return ::killpg(pgid, signal) == 0 || errno != ESRCH;
}

void signal_each(const std::vector<pid_t>& pids, int signal) {
  for (pid_t p : pids)
    if (p > 1) ::kill(p, signal);
}

void signal_groups_and_strays(const std::vector<pid_t>& groups, int signal, bool include_descendants, bool wake) {
  // Every descendant and its group, taken *before* the groups are signalled: a process that calls setsid while
  // we signal must not get the group's signal and then the sweep's as well. (One that leaves its group in the
  // instant between this snapshot and killpg gets neither, and SIGKILL at the end of the grace period: at most
  // one SIGTERM, never two.)
  std::vector<std::pair<pid_t, pid_t>> descendants;
  if (include_descendants)
    for (pid_t pid : descendants_of(::getpid())) descendants.emplace_back(pid, ::getpgid(pid));
  std::vector<pid_t> signalled;
  for (pid_t group : groups)
    if (signal_group(group, signal)) {
      signalled.push_back(group);
      if (wake) signal_group(group, SIGCONT);
    }
  std::vector<pid_t> strays;
  for (const auto& [pid, group] : descendants)
    if (std::find(signalled.begin(), signalled.end(), group) == signalled.end()) strays.push_back(pid);
  signal_each(strays, signal);
  if (wake) signal_each(strays, SIGCONT);
}

std::string read_file(const std::string& path, std::size_t limit) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[16384];
  while (out.size() < limit) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

bool own_environment_block(std::uintptr_t& start, std::uintptr_t& end) {
  const std::string stat = read_file("/proc/self/stat", 4096);
  const char* after_name = fields_after_command_name(stat.c_str());
  if (!after_name) return false;
  // env_start and env_end are fields 50 and 51 (Linux 3.5 and later).
  std::istringstream fields(after_name);
  std::string field;
  for (int n = 3; n <= 51 && (fields >> field); ++n) {
    if (n == 50) start = static_cast<std::uintptr_t>(std::strtoull(field.c_str(), nullptr, 10));
    if (n == 51) {
      end = static_cast<std::uintptr_t>(std::strtoull(field.c_str(), nullptr, 10));
      return start != 0 && end > start;
    }
  }
  return false;
}

}  // namespace ddprun::process
