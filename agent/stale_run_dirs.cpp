#include "agent/stale_run_dirs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ddprun::agent {
namespace {

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot; "" when it is gone. Read
// after the last ')' (the command name may hold spaces and parentheses).
std::string start_time(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return {};
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

bool looks_like_run_dir(const std::string& name) {
  return name.rfind("ddprun-", 0) == 0 && name.size() > 14 && name[name.size() - 7] == '_';
}

}  // namespace

void mark_run_dir_owner(const std::string& dir) {
  const std::string text = boot_id() + " " + std::to_string(::getpid()) + " " + start_time(::getpid()) + "\n";
  const int fd = ::open((dir + "/" + kOwnerFileName).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t written = ::write(fd, text.data(), text.size());
  ::close(fd);
}

int sweep_stale_run_dirs(const std::string& base) {
  DIR* d = ::opendir(base.c_str());
  if (!d) return 0;
  const std::string this_boot = boot_id();
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!looks_like_run_dir(name)) continue;
    const std::string dir = base + "/" + name;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) continue;
    std::ifstream owner(dir + "/" + kOwnerFileName);
    std::string boot, started;
    long pid = 0;
    if (!(owner >> boot >> pid >> started) || boot != this_boot || pid <= 0) continue;
    if (start_time(pid) == started) continue;  // its maker still runs
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (!ec) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace ddprun::agent
