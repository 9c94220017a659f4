#include "common/process/job_cgroup.hpp"

#include "common/process/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

namespace ddprun::process {
namespace {

bool write_file(const std::string& path, const char* text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
  ::close(fd);
  return ok;
}

// This process's path in a hierarchy, from /proc/self/cgroup: cgroup v2's "0::/path" (controller "") or the
// cgroup v1 line whose controller list names `controller`. False when there is none.
bool own_hierarchy_path(const std::string& controller, std::string& relative) {
  std::istringstream cgroups(read_file("/proc/self/cgroup"));
  bool found = false;
  for (std::string line; std::getline(cgroups, line);) {
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    const bool match = controller.empty() ? line.rfind("0::", 0) == 0
                                          : controllers.find("," + controller + ",") != std::string::npos;
    if (match) {
      relative = line.substr(second + 1);
      found = true;
    }
  }
  return found;
}

// Where the hierarchy path `relative` is in the file system: on the mount of `fstype` ("cgroup2", or
// "cgroup" whose options name `controller`). "" when no such mount is seen; `mount_point` gets its root.
std::string mounted_dir(std::string relative, const std::string& fstype, const std::string& controller,
                        std::string* mount_point = nullptr) {
  // mountinfo: "id parent major:minor root mount-point options [optional...] - fstype source super-options"
  std::istringstream mounts(read_file("/proc/self/mountinfo"));
  for (std::string line; std::getline(mounts, line);) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, fstype.size() + 1, fstype + " ") != 0) continue;
    if (!controller.empty()) {
      std::istringstream tail(line.substr(dash + 3));
      std::string type, source, options;
      tail >> type >> source >> options;
      if (("," + options + ",").find("," + controller + ",") == std::string::npos) continue;
    }
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, device, root, point;
    fields >> id >> parent >> device >> root >> point;
    // A mount of a sub-tree (a container's cgroup namespace seen from outside) shows its root: our path is
    // relative to the hierarchy's root, the mount point to the mount's.
    if (root != "/") {
      if (relative.rfind(root, 0) != 0) continue;
      relative = relative.substr(root.size());
    }
    if (relative == "/") relative.clear();
    if (mount_point) *mount_point = point;
    return point + relative;
  }
  return "";
}

// The directory of this process's cgroup on the cgroup2 mount, or "" (with `why`) when there is none.
std::string own_cgroup_dir(std::string& why) {
  std::string relative;
  if (!own_hierarchy_path("", relative)) {
    why = "this process is in no cgroup v2 hierarchy";
    return "";
  }
  const std::string dir = mounted_dir(relative, "cgroup2", "");
  if (dir.empty()) why = "no cgroup2 file system is mounted";
  return dir;
}

// `path` and every cgroup below it, parents before children.
void collect_tree(const std::string& path, std::vector<std::string>& out) {
  out.push_back(path);
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return;
  std::vector<std::string> children;
  while (dirent* e = ::readdir(dir))
    if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      children.push_back(path + "/" + e->d_name);
  ::closedir(dir);
  for (const std::string& child : children) collect_tree(child, out);
}

bool populated(const std::string& path) {
  return read_file(path + "/cgroup.events").find("populated 1") != std::string::npos;
}

}  // namespace

std::vector<pid_t> cgroup_tree_pids(const std::string& path) {
  std::vector<std::string> tree;
  collect_tree(path, tree);
  std::vector<pid_t> pids;
  for (const std::string& dir : tree) {
    std::istringstream procs(read_file(dir + "/cgroup.procs"));
    for (pid_t pid; procs >> pid;) pids.push_back(pid);
  }
  return pids;
}

int kill_cgroup_tree(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return 0;
  const int found = static_cast<int>(cgroup_tree_pids(path).size());
  const bool has_kill = write_file(path + "/cgroup.kill", "1");
  // Before Linux 5.14 (no cgroup.kill): one by one, again until a read finds nobody (a fork between the
  // read and the kill lands in the same cgroup and is read next time). Bounded: ~2 s.
  for (int round = 0; round < 400 && populated(path); ++round) {
    if (!has_kill)
      for (pid_t pid : cgroup_tree_pids(path)) ::kill(pid, SIGKILL);
    ::usleep(5000);
  }
  std::vector<std::string> tree;
  collect_tree(path, tree);
  for (auto dir = tree.rbegin(); dir != tree.rend(); ++dir) ::rmdir(dir->c_str());
  return found;
}

JobCgroup JobCgroup::create(const std::string& name) {
  JobCgroup cg;
  if (const char* off = std::getenv("DDPRUN_NO_CGROUP"); off != nullptr && std::strcmp(off, "1") == 0) {
    cg.why_not_ = "turned off by DDPRUN_NO_CGROUP=1";
    return cg;
  }
  const std::string own = own_cgroup_dir(cg.why_not_);
  if (own.empty()) return cg;
  // Moving a process needs write access to cgroup.procs of the common ancestor of where it is and where it
  // goes: our own cgroup (the workers are forked in it).
  if (::access((own + "/cgroup.procs").c_str(), W_OK) != 0) {
    cg.why_not_ = "cannot move processes out of " + own + " (" + std::strerror(errno) + ")";
    return cg;
  }
  const std::string path = own + "/ddprun-" + name;
  if (::mkdir(path.c_str(), 0755) != 0) {
    cg.why_not_ = "cannot create " + path + " (" + std::strerror(errno) + ")";
    return cg;
  }
  cg.procs_fd_ = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (cg.procs_fd_ < 0) {
    cg.why_not_ = "cannot open " + path + "/cgroup.procs (" + std::strerror(errno) + ")";
    ::rmdir(path.c_str());
    return cg;
  }
  cg.dir_fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // -1: every child moves itself in
  cg.path_ = path;
  return cg;
}

namespace {
// "oom_kill 3" among a file's "key value" lines (memory.events, memory.oom_control, /proc/meminfo's
// "MemTotal: N kB"); -1: not there.
long long counter_in(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string name;
    long long value = -1;
    if (fields >> name >> value && name == key) return value;
  }
  return -1;
}

std::string bytes_text(unsigned long long bytes) {
  char text[64];
  if (bytes >= (1ULL << 30)) std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1ULL << 30));
  else std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1ULL << 20));
  return text;
}

// A limit file's value: memory.max's "max", or v1's "no limit" (the largest page-aligned number), is none.
bool limit_in(const std::string& text, unsigned long long& bytes) {
  if (text.empty() || text.rfind("max", 0) == 0) return false;
  char* end = nullptr;
  errno = 0;
  bytes = std::strtoull(text.c_str(), &end, 10);
  return errno == 0 && end != text.c_str() && bytes < (1ULL << 62);
}
}  // namespace

OomKillCounter::OomKillCounter(std::string counter_file, std::string dir, std::string top, std::string limit_name)
    : counter_file_(std::move(counter_file)), dir_(std::move(dir)), top_(std::move(top)),
      limit_name_(std::move(limit_name)) {}

OomKillCounter OomKillCounter::locate(const std::string& job_cgroup) {
  std::string why, top;
  std::string relative;
  if (own_hierarchy_path("", relative)) {
    const std::string own = mounted_dir(relative, "cgroup2", "", &top);
    std::string dir = job_cgroup.empty() ? own : job_cgroup;
    for (; !dir.empty() && dir.size() >= top.size(); dir = dir.substr(0, dir.rfind('/'))) {
      struct stat st {};
      if (::stat((dir + "/memory.events").c_str(), &st) == 0)
        return OomKillCounter(dir + "/memory.events", dir, top, "memory.max");
      if (dir == top) break;
    }
  }
  if (own_hierarchy_path("memory", relative)) {
    const std::string dir = mounted_dir(relative, "cgroup", "memory", &top);
    struct stat st {};
    if (!dir.empty() && ::stat((dir + "/memory.oom_control").c_str(), &st) == 0)
      return OomKillCounter(dir + "/memory.oom_control", dir, top, "memory.limit_in_bytes");
  }
  return {};
}

long long OomKillCounter::kills() const {
  return active() ? counter_in(read_file(counter_file_), "oom_kill") : -1;
}

std::string OomKillCounter::limit() const {
  // The smallest limit on the way up is the one that binds.
  unsigned long long lowest = 0;
  std::string where;
  for (std::string dir = dir_; !dir.empty() && dir.size() >= top_.size(); dir = dir.substr(0, dir.rfind('/'))) {
    unsigned long long bytes = 0;
    if (limit_in(read_file(dir + "/" + limit_name_), bytes) && (where.empty() || bytes < lowest)) {
      lowest = bytes;
      where = dir;
    }
    if (dir == top_) break;
  }
  if (!where.empty()) return "memory limit " + bytes_text(lowest) + ", set by " + limit_name_ + " of " + where;
  const long long total_kib = counter_in(read_file("/proc/meminfo"), "MemTotal:");
  return "no cgroup memory limit, so the machine's " +
         (total_kib > 0 ? bytes_text(static_cast<unsigned long long>(total_kib) * 1024) + " " : std::string()) +
         "ran out";
}

JobCgroup::JobCgroup(JobCgroup&& other) noexcept
    : path_(std::move(other.path_)), why_not_(std::move(other.why_not_)),
      procs_fd_(std::exchange(other.procs_fd_, -1)), dir_fd_(std::exchange(other.dir_fd_, -1)) {}

JobCgroup& JobCgroup::operator=(JobCgroup&& other) noexcept {
  if (this != &other) {
    this->~JobCgroup();
    path_ = std::move(other.path_);
    why_not_ = std::move(other.why_not_);
    procs_fd_ = std::exchange(other.procs_fd_, -1);
    dir_fd_ = std::exchange(other.dir_fd_, -1);
  }
  return *this;
}

JobCgroup::~JobCgroup() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

int JobCgroup::end() {
  if (!active()) return 0;
  ::close(procs_fd_);
  procs_fd_ = -1;
  if (dir_fd_ >= 0) ::close(dir_fd_);
  dir_fd_ = -1;
  return kill_cgroup_tree(path_);
}

}  // namespace ddprun::process
