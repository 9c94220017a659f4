#include "agent/child_reaper.hpp"

#include <sys/wait.h>

#include <cerrno>
#include <csignal>

namespace ddprun::agent {

ChildReaper::ChildReaper(boost::asio::io_context& io, ExitHandler on_exit, BatchHandler after_batch)
    : sigchld_(io, SIGCHLD), on_exit_(std::move(on_exit)), after_batch_(std::move(after_batch)) {}

void ChildReaper::start() { wait_next(); }

void ChildReaper::stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  sigchld_.cancel(ignored);
}

void ChildReaper::wait_next() {
  sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;  // operation_aborted: shutting down
    reap_now();
    if (!stopped_) wait_next();  // a handler of reap_now() may have stopped us
  });
}

void ChildReaper::reap_now() {
  // SIGCHLD is not queued: one signal may stand for many exits, so reap until nothing is left.
  bool has_children = true;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      on_exit_(pid, process::decode_wait_status(status));
      continue;
    }
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0 && errno == ECHILD) has_children = false;
    break;
  }
  after_batch_(has_children);
}

}  // namespace ddprun::agent
