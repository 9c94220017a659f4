#include "common/runtime_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ddprun {

std::string private_runtime_dir(std::string& problem) {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir = runtime != nullptr && runtime[0] == '/' ? std::string(runtime) + "/ddprun"
                                                                  : "/tmp/ddprun-" + std::to_string(::geteuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    problem = "cannot create " + dir + ": " + std::strerror(errno);
    return {};
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0) {
    problem = dir + " is not a private directory of this user (a directory, owned by uid " +
              std::to_string(::geteuid()) + ", mode 0700): not used, so other users cannot reach this job" +
              (runtime != nullptr && runtime[0] == '/'
                   ? std::string()
                   : "; set XDG_RUNTIME_DIR to a private directory of yours (a login session's /run/user/" +
                         std::to_string(::geteuid()) + ") to use that instead");
    return {};
  }
  return dir;
}

}  // namespace ddprun
