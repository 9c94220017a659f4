// common/write_queue.hpp's create_file: the writer thread makes the file (and its directories); a file that
// cannot be made breaks the queue like a failed write, never the caller's thread.
#include "common/write_queue.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <doctest/doctest.h>
#include <fstream>
#include <mutex>
#include <string>

#include "common/process/process_tree.hpp"
#include "temp_dir.hpp"

using ddprun::WriteQueue;

namespace {
struct Break {
  std::mutex mu;
  int err = 0;
  bool opened = true;
  bool called = false;
};

// Writes `text`, finishes, waits for the queue to be idle; returns its stats.
ddprun::WriteQueueStats write_all(const std::string& path, const std::string& text, Break& b) {
  const int drained = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  WriteQueue::Options o;
  o.drained_fd = drained;
  o.on_break = [&b](int err, std::uint64_t, bool opened) {
    std::lock_guard<std::mutex> lock(b.mu);
    b.err = err;
    b.opened = opened;
    b.called = true;
  };
  auto q = WriteQueue::create_file(path, o);
  q->start();
  q->write(text);
  q->finish();
  sigset_t none;
  sigemptyset(&none);
  REQUIRE(ddprun::wait_until_idle({q.get()}, drained, none));
  const auto st = q->stats();
  ::close(drained);
  return st;
}

}  // namespace

TEST_CASE("create_file makes the file and its directories in the writer thread") {
  TempDir d;
  const std::string path = d.path + "/attempt_1/0/stdout.log";
  Break b;
  const auto st = write_all(path, "one\ntwo\n", b);
  CHECK_FALSE(b.called);
  CHECK(st.written_bytes == 8);
  CHECK(ddprun::process::read_file(path) == "one\ntwo\n");
  struct stat s {};
  REQUIRE(::stat(path.c_str(), &s) == 0);
  CHECK((s.st_mode & 0777) == 0644);
}

TEST_CASE("a file that cannot be created breaks the queue: said once, every line counted lost") {
  TempDir d;
  const std::string blocker = d.path + "/file";
  std::ofstream(blocker) << "x";
  Break b;
  const auto st = write_all(blocker + "/stdout.log", "a\nb\nc\n", b);  // a file where a directory must be
  CHECK(b.called);
  CHECK_FALSE(b.opened);
  CHECK(b.err == ENOTDIR);
  CHECK(st.never_opened);
  CHECK(st.lost_lines == 3);
}

TEST_CASE("a FIFO planted at the path without a reader fails at once instead of holding the thread") {
  TempDir d;
  const std::string path = d.path + "/stdout.log";
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  Break b;
  const auto st = write_all(path, "line\n", b);
  CHECK(b.called);
  CHECK(b.err == ENXIO);
  CHECK(st.never_opened);
}

TEST_CASE("a symbolic link planted at the path is not followed") {
  TempDir d;
  const std::string target = d.path + "/target";
  std::ofstream(target) << "keep\n";
  const std::string path = d.path + "/stdout.log";
  REQUIRE(::symlink(target.c_str(), path.c_str()) == 0);
  Break b;
  write_all(path, "overwritten\n", b);
  CHECK(b.called);
  CHECK(b.err == ELOOP);
  CHECK(ddprun::process::read_file(target) == "keep\n");
}
