// The live view's socket (agent/status_socket.hpp) out of descriptors: a connection it cannot accept stays queued,
// and accepting again at once was a busy loop that took the agent's whole loop (issue 33). A real socket in a
// forked process with its descriptors used up, a real client, and the CPU time the loop spent.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent/status_socket.hpp"
#include "tests/agent/temp_dir.hpp"

using namespace ddprun::agent;

namespace {
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}
}  // namespace

TEST_CASE("out of descriptors, the live view waits for one instead of spinning on accept") {
  TempDir dir;
  int to_parent[2];
  REQUIRE(::pipe(to_parent) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("XDG_RUNTIME_DIR", dir.path.c_str(), 1);
    boost::asio::io_context io;
    StatusSocket socket(io, [](StatusSocket::Reply reply) { reply("{}"); });
    std::string problem;
    if (!socket.open("emfile", problem)) ::_exit(2);
    const std::string path = socket.path() + "\n";
    if (::write(to_parent[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) ::_exit(3);
    // Every descriptor used: a low limit, then duplicates until none is left.
    rlimit limit{64, 64};
    ::setrlimit(RLIMIT_NOFILE, &limit);
    std::vector<int> held;
    for (int fd; (fd = ::dup(0)) >= 0;) held.push_back(fd);
    if (::write(to_parent[1], "r", 1) != 1) ::_exit(4);
    const double before = cpu_seconds();
    io.run_for(std::chrono::seconds(1));
    ::_exit(cpu_seconds() - before < 0.3 ? 0 : 1);  // a busy loop burns the whole second
  }
  ::close(to_parent[1]);
  std::string path;
  char c = 0;
  while (::read(to_parent[0], &c, 1) == 1 && c != '\n') path += c;
  REQUIRE(::read(to_parent[0], &c, 1) == 1);  // its descriptors are used up
  ::close(to_parent[0]);
  const int client = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  const int connected = ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  CHECK_MESSAGE(connected == 0, (path + ": " + std::strerror(errno)));  // queued: nothing can accept it
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  ::close(client);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// Issue 33: another user who makes the private directory first (/tmp/ddprun-<uid>, or $XDG_RUNTIME_DIR/ddprun)
// must not get this job's sockets: a directory that is not this user's own, 0700 and real, is refused with a
// sentence saying why, and never taken over (its mode and owner stay as they were).
TEST_CASE("a private directory made by someone else, open to others or a link is refused, never taken over") {
  TempDir base;
  struct RestoreRuntimeDir {  // however the case ends
    const char* before = std::getenv("XDG_RUNTIME_DIR");
    std::string saved = before ? before : "";
    ~RestoreRuntimeDir() {
      if (before) ::setenv("XDG_RUNTIME_DIR", saved.c_str(), 1);
      else ::unsetenv("XDG_RUNTIME_DIR");
    }
  } restore;
  ::setenv("XDG_RUNTIME_DIR", base.path.c_str(), 1);
  const std::string dir = base.path + "/ddprun";
  std::string problem;
  struct stat st {};

  SUBCASE("missing: made, 0700") {
    CHECK(status_directory(problem) == dir);
    CHECK(problem.empty());
    REQUIRE(::lstat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0700);
  }
  SUBCASE("open to others: refused, left as it is") {
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
    ::chmod(dir.c_str(), 0755);  // whatever the umask
    CHECK(status_directory(problem).empty());
    CHECK(problem == dir + " is not a private directory of this user (a directory, owned by uid " +
                         std::to_string(::geteuid()) + ", mode 0700): not used, so other users cannot reach this job");
    REQUIRE(::lstat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0755);
  }
  SUBCASE("a link to a private directory: refused") {
    const std::string target = base.path + "/elsewhere";
    REQUIRE(::mkdir(target.c_str(), 0700) == 0);
    REQUIRE(::symlink(target.c_str(), dir.c_str()) == 0);
    CHECK(status_directory(problem).empty());
    CHECK(problem.find("is not a private directory of this user") != std::string::npos);
  }
  SUBCASE("another user's, 0700: refused, still theirs") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: making a directory another user owns needs root");
      return;
    }
    REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
    CHECK(status_directory(problem).empty());
    CHECK(problem.find("is not a private directory of this user") != std::string::npos);
    REQUIRE(::lstat(dir.c_str(), &st) == 0);
    CHECK(st.st_uid == 65534u);
  }
}
