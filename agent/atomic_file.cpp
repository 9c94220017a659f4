#include "agent/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddprun::agent {

std::string write_file_atomically(const std::string& dir, const std::string& name, const std::string& text, mode_t mode) {
  // A dot first and .tmp last: a reader polling for the name (node_exporter: *.prom) never takes it.
  const std::string tmp = dir + "/." + name + "." + std::to_string(::getpid()) + ".tmp";
  ::unlink(tmp.c_str());  // our own leftover (a pid is unique among the living); another user's stays, and fails below
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = "cannot write " + tmp + ": " + std::strerror(n < 0 ? errno : ENOSPC);
      ::close(fd);
      ::unlink(tmp.c_str());
      return why;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const std::string why = "cannot write " + tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  if (::rename(tmp.c_str(), (dir + "/" + name).c_str()) != 0) {
    const std::string why = "cannot rename " + tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  return {};
}

}  // namespace ddprun::agent
