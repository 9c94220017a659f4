#include "agent/output_pump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/console.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace ddprun::agent {
namespace {
constexpr std::size_t kReadSize = 256 * 1024;
}  // namespace

Pipe make_output_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw SystemError("pipe2", errno);  // the agent's errors are ddprun's
  ::fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);  // best effort: may exceed /proc/sys/fs/pipe-max-size
  return {fds[0], fds[1]};
}

OutputPump::OutputPump(boost::asio::io_context& io, int pipe_fd, PumpTargets targets, PumpScratch& scratch,
                       std::function<void()> on_eof)
    : pipe_(io, pipe_fd), targets_(std::move(targets)), framer_(targets_.prefix), scratch_(scratch),
      on_eof_(std::move(on_eof)) {
  boost::system::error_code ignored;
  pipe_.non_blocking(true, ignored);  // read_ready() reads by itself once the loop says there is data
}

OutputPump::~OutputPump() {
  auto& waiting = scratch_.waiting_for_room;
  waiting.erase(std::remove(waiting.begin(), waiting.end(), this), waiting.end());
  if (targets_.file) targets_.file->finish();
}

void OutputPump::start() { read_next(); }

// Waits for readiness rather than reading into a buffer of our own: no memory is tied up while a worker
// is quiet, which is most of the time.
void OutputPump::read_next() {
  pipe_.async_wait(boost::asio::posix::descriptor_base::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) {  // operation_aborted when abandoned
      finish();
      return;
    }
    read_ready();
  });
}

void OutputPump::read_ready() {
  if (scratch_.read.size() < kReadSize) scratch_.read.resize(kReadSize);
  for (;;) {
    const ssize_t n = ::read(pipe_.native_handle(), scratch_.read.data(), scratch_.read.size());
    if (n > 0) {
      deliver(scratch_.read.data(), static_cast<std::size_t>(n));
      if ((targets_.console_fd >= 0 && console::congested(targets_.console_fd)) ||
          (targets_.file && targets_.file->congested())) {
        // Back-pressure: the worker's pipe fills and the worker waits in its write, not the loop.
        waiting_for_room_ = true;
        scratch_.waiting_for_room.push_back(this);
        // Told as an end is: a restart does not wait for a stream that waits for the console, and the agent
        // must look again now. Before, a stream that began waiting after the last worker was reaped left the
        // restart waiting for the console to drain (integration.supervisor_matrix, a loaded CI run).
        if (on_eof_) on_eof_();
        return;
      }
      return read_next();  // one read per wake-up: a flooding worker does not starve the others
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return read_next();
    return finish();  // end of file (every writer gone), or a read error
  }
}

void OutputPump::deliver(const char* data, std::size_t n) {
  if (targets_.tail) targets_.tail->add(data, n);
  if (targets_.file) targets_.file->write(std::string_view(data, n));
  if (targets_.console_fd < 0) return;
  std::string& out = scratch_.out;
  out.clear();
  framer_.feed(data, n, out);
  if (!out.empty()) console::write(targets_.console_fd, out);
}

void OutputPump::resume() {
  if (!waiting_for_room_ || finished_) return;
  waiting_for_room_ = false;
  read_next();
}

void OutputPump::finish() {
  if (finished_) return;
  finished_ = true;
  waiting_for_room_ = false;
  if (targets_.console_fd >= 0) {
    std::string& out = scratch_.out;
    out.clear();
    framer_.finish(out);
    if (!out.empty()) console::write(targets_.console_fd, out);
  }
  if (targets_.file) targets_.file->finish();  // closed once what is queued is written
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (on_eof_) on_eof_();
}

void OutputPump::abandon() {
  if (waiting_for_room_) {  // no wait is pending to cancel
    auto& waiting = scratch_.waiting_for_room;
    waiting.erase(std::remove(waiting.begin(), waiting.end(), this), waiting.end());
    return finish();
  }
  boost::system::error_code ignored;
  pipe_.cancel(ignored);
}

}  // namespace ddprun::agent
