#include "agent/run_layout.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "agent/stale_run_dirs.hpp"
#include "common/error.hpp"

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {
// Where the temporary run directory goes: $TMPDIR when set, else a RAM file system. On disk, removing the
// ten directories of an 8-worker run at exit cost ~20 ms on a file system mounted with `discard` (each
// rmdir waits for the device), which was most of ddprun's teardown time; on tmpfs it is microseconds.
// The candidates in order; the first usable one with room wins (issue 33: a full /dev/shm made every job
// refuse to start, 73, while /tmp had room).
std::vector<std::string> temporary_bases() {
  std::vector<std::string> bases;
  for (const char* var : {"TMPDIR", "XDG_RUNTIME_DIR"}) {
    const char* v = std::getenv(var);
    if (v && *v) bases.emplace_back(v);
  }
  bases.emplace_back("/dev/shm");
  bases.emplace_back("/tmp");
  return bases;
}

// Room for a run directory: its few directories and files (error files, stacks, re-form files, the output of
// --log-dir's copy is elsewhere). "" when there is, else why not.
std::string lacks_room(const std::string& base) {
  if (::access(base.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  struct statvfs fs {};
  if (::statvfs(base.c_str(), &fs) != 0) return std::strerror(errno);
  constexpr unsigned long long kMinBytes = 1ULL << 20, kMinFiles = 64;
  if (static_cast<unsigned long long>(fs.f_bavail) * fs.f_frsize < kMinBytes) return "full (less than 1 MiB free)";
  if (fs.f_files > 0 && fs.f_favail < kMinFiles) return "out of inodes";
  return {};
}
// <root>/attempt_<n>, the one spelling of an attempt's directory in either tree.
std::string attempt_dir(const std::string& root, int attempt) { return root + "/attempt_" + std::to_string(attempt); }

std::string make_private_dir(const std::string& base, const std::string& name) {
  std::string path = base + "/" + name + "_XXXXXX";
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw CantCreateError("cannot create run directory in " + base, errno);
  return buf.data();
}

// With --log-dir, at the end: the work tree's directories (attempt_N/<local_rank>, as torchrun makes them)
// and files (error files, stacks) go where torchrun's layout has them. Best effort: the log tree's file
// system may be full; what could not be copied stays unnamed.
// One regular file, following no link on either side: a link a worker planted where the copy goes is replaced, not
// written through (issue 33: a root ddprun overwrote the link's target), and one planted in the work tree is not
// read. Its mode is the source's.
void copy_regular_file(const fs::path& from, const fs::path& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (in < 0) return;
  struct stat st {};
  if (::fstat(in, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(in);
    return;
  }
  ::unlink(to.c_str());  // whatever is there: a link goes itself, its target stays untouched
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0777);
  char buffer[65536];
  for (ssize_t n; out >= 0 && (n = ::read(in, buffer, sizeof buffer)) > 0;)
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::write(out, buffer + done, static_cast<std::size_t>(n - done));
      if (w <= 0 && errno != EINTR) break;
      if (w > 0) done += w;
    }
  if (out >= 0) ::close(out);
  ::close(in);
}

// The work tree into the log tree, top down; links on either side are never followed (copy_regular_file).
void copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code one;
    const fs::path target = to / fs::relative(it->path(), from, one);
    if (it->path().filename() == kOwnerFileName) continue;  // the work tree's, not the user's
    const fs::file_type type = it->symlink_status(one).type();
    if (type == fs::file_type::directory) {
      if (fs::is_symlink(fs::symlink_status(target, one))) fs::remove(target, one);  // the link, not where it goes
      fs::create_directory(target, one);
    } else if (type == fs::file_type::regular) {
      copy_regular_file(it->path(), target);
    }
  }
}
}  // namespace

// The run's temporary directory in the first candidate base with room; the bases passed by go into `note`.
std::string make_temporary_dir(const std::string& name, std::string& note) {
  const std::vector<std::string> bases = temporary_bases();
  std::string problems;
  for (const std::string& base : bases) {
    std::string why = lacks_room(base);
    if (why.empty()) {
      try {
        std::string dir = make_private_dir(base, name);
        mark_run_dir_owner(dir);
        sweep_stale_run_dirs(base);  // those of runs killed with their guard (stale_run_dirs.hpp)
        if (!problems.empty()) note = "the run directory is in " + base + ": " + problems;
        return dir;
      } catch (const CantCreateError& e) {
        why = e.what();
      }
    }
    problems += (problems.empty() ? "" : "; ") + base + " " + why;
  }
  throw CantCreateError("no place for the run directory: " + problems + " (set TMPDIR to a writable directory)");
}

RunLayout RunLayout::create(const std::string& log_dir, const std::string& run_id) {
  RunLayout layout;
  if (log_dir.empty()) {
    layout.temporary_ = true;
    layout.root_ = make_temporary_dir("ddprun-" + run_id, layout.note_);
    layout.work_root_ = layout.root_;
    return layout;
  }
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  if (ec) throw CantCreateError("cannot create log directory " + log_dir, ec.value());
  layout.root_ = make_private_dir(log_dir, run_id);
  try {
    layout.work_root_ = make_temporary_dir("ddprun-" + run_id, layout.note_);
  } catch (...) {
    ::rmdir(layout.root_.c_str());
    throw;
  }
  return layout;
}

std::string RunLayout::worker_dir(int attempt, int local_rank) const {
  return attempt_dir(root_, attempt) + "/" + std::to_string(local_rank);
}

std::string RunLayout::work_dir(int attempt, int local_rank) const {
  return attempt_work_file(attempt, std::to_string(local_rank));
}

std::string RunLayout::attempt_work_file(int attempt, const std::string& name) const {
  return attempt_dir(work_root_, attempt) + "/" + name;
}

std::string RunLayout::published(const std::string& work_path) const {
  if (work_root_ == root_ || work_path.rfind(work_root_, 0) != 0) return work_path;
  return root_ + work_path.substr(work_root_.size());
}

void RunLayout::prepare_attempt(int attempt, int local_world_size) const {
  for (int lr = 0; lr < local_world_size; ++lr) {
    std::error_code ec;
    fs::create_directories(work_dir(attempt, lr), ec);
    if (ec) throw CantCreateError("cannot create " + work_dir(attempt, lr), ec.value());
    ::unlink(error_file(attempt, lr).c_str());
  }
}

void RunLayout::cleanup() const {
  if (root_.empty()) return;
  std::error_code ec;
  if (!temporary_) {
    if (work_root_.empty() || work_root_ == root_) return;
    copy_tree(work_root_, root_);
    fs::remove_all(work_root_, ec);
    return;
  }
  if (kept_.empty()) {
    fs::remove_all(root_, ec);
    return;
  }
  std::vector<fs::path> dirs;
  for (auto it = fs::recursive_directory_iterator(root_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory(ec)) {
      dirs.push_back(it->path());
    } else if (std::find(kept_.begin(), kept_.end(), it->path().string()) == kept_.end()) {
      fs::remove(it->path(), ec);
    }
  }
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) fs::remove(*d, ec);  // the empty ones only
}

std::string check_writable_dir(const std::string& dir, bool may_be_missing) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return dir + " exists and is not a directory";
    if (::access(dir.c_str(), W_OK | X_OK) != 0) return dir + " is not writable (" + std::strerror(errno) + ")";
    return "";
  }
  if (errno != ENOENT) return "cannot use " + dir + " (" + std::strerror(errno) + ")";
  if (!may_be_missing) return dir + " does not exist";
  // Not there yet: the nearest existing ancestor must be a writable directory.
  fs::path p = fs::absolute(dir).parent_path();
  while (!p.empty() && ::stat(p.c_str(), &st) != 0) {
    if (p == p.root_path()) break;
    p = p.parent_path();
  }
  if (!S_ISDIR(st.st_mode)) return "cannot create " + dir + ": " + p.string() + " is not a directory";
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    return "cannot create " + dir + ": " + p.string() + " is not writable (" + std::strerror(errno) + ")";
  return "";
}

}  // namespace ddprun::agent
