#include "common/process/job_cgroup.hpp"

#include "common/process/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
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

// The directory of this process's cgroup on the cgroup2 mount, or "" (with `why`) when there is none.
std::string own_cgroup_dir(std::string& why) {
  std::string relative;
  bool found = false;
  std::istringstream cgroups(read_file("/proc/self/cgroup"));
  for (std::string line; std::getline(cgroups, line);)
    if (line.rfind("0::", 0) == 0) {
      relative = line.substr(3);
      found = true;
    }
  if (!found) {
    why = "this process is in no cgroup v2 hierarchy";
    return "";
  }
  // mountinfo: "id parent major:minor root mount-point options [optional...] - fstype source super-options"
  std::istringstream mounts(read_file("/proc/self/mountinfo"));
  for (std::string line; std::getline(mounts, line);) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, device, root, mount_point;
    fields >> id >> parent >> device >> root >> mount_point;
    // A mount of a sub-tree (a container's cgroup namespace seen from outside) shows its root: our path is
    // relative to the hierarchy's root, the mount point to the mount's.
    if (root != "/") {
      if (relative.rfind(root, 0) != 0) continue;
      relative = relative.substr(root.size());
    }
    if (relative == "/") relative.clear();
    return mount_point + relative;
  }
  why = "no cgroup2 file system is mounted";
  return "";
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
  cg.path_ = path;
  return cg;
}

JobCgroup::JobCgroup(JobCgroup&& other) noexcept
    : path_(std::move(other.path_)), why_not_(std::move(other.why_not_)),
      procs_fd_(std::exchange(other.procs_fd_, -1)) {}

JobCgroup& JobCgroup::operator=(JobCgroup&& other) noexcept {
  if (this != &other) {
    this->~JobCgroup();
    path_ = std::move(other.path_);
    why_not_ = std::move(other.why_not_);
    procs_fd_ = std::exchange(other.procs_fd_, -1);
  }
  return *this;
}

JobCgroup::~JobCgroup() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
}

int JobCgroup::end() {
  if (!active()) return 0;
  ::close(procs_fd_);
  procs_fd_ = -1;
  return kill_cgroup_tree(path_);
}

}  // namespace ddprun::process
