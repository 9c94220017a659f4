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
// Bounded so that a turn of the loop stays short (the loop probe's longest stretch of work: 1 MiB reads, framed
// and queued, took up to 14 ms of the loop's CPU under load).
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
    if (ec || abandoned_) return finish();  // operation_aborted when abandoned
    read_ready();
  });
}

// The bytes land where they go next, so that a flood costs the kernel's copies and not ours: without a prefix,
// straight in the console's buffer (the framer only keeps the last incomplete line back); for a log file, in the
// file's buffer (the console's prefixed lines are framed from it); with neither, in the shared scratch buffer.
void OutputPump::read_ready() {
  const bool console = targets_.console_fd >= 0;
  const bool in_place = console && !targets_.file && framer_.prefix().empty();
  for (;;) {
    Buffer raw;
    std::size_t head = 0;  // in place: room for the line carried from the last read
    if (in_place) {
      head = framer_.partial_size();
      raw = Buffer::take(head + kReadSize);
    } else if (targets_.file) {
      raw = Buffer::take(kReadSize);
    } else {
      scratch_.read.reserve(kReadSize);
    }
    char* dst = (in_place || targets_.file ? raw.data() : scratch_.read.data()) + head;
    const ssize_t n = ::read(pipe_.native_handle(), dst, kReadSize);
    if (n > 0) {
      if (in_place || targets_.file) raw.resize(head + static_cast<std::size_t>(n));
      deliver(dst, static_cast<std::size_t>(n), std::move(raw), in_place);
      if ((console && console::congested(targets_.console_fd)) || (targets_.file && targets_.file->congested())) {
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
    Buffer::recycle(std::move(raw));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return read_next();
    return finish();  // end of file (every writer gone), or a read error
  }
}

// data[0..n): the new bytes (inside `raw` when it holds them).
void OutputPump::deliver(const char* data, std::size_t n, Buffer&& raw, bool in_place) {
  if (targets_.tail) targets_.tail->add(data, n);
  if (in_place) {
    framer_.frame_in_place(raw);
    if (!raw.empty()) console::write(targets_.console_fd, std::move(raw));
    return;
  }
  if (targets_.console_fd >= 0) {
    Buffer out = Buffer::take(n + n / 4 + 64);  // room for the prefixes of lines of 40 bytes or more
    framer_.feed(data, n, out);
    if (!out.empty()) console::write(targets_.console_fd, std::move(out));
    else Buffer::recycle(std::move(out));
  }
  if (targets_.file) targets_.file->write(std::move(raw));
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
    Buffer out;
    framer_.finish(out);
    if (!out.empty()) console::write(targets_.console_fd, std::move(out));
  }
  if (targets_.file) targets_.file->finish();  // closed once what is queued is written
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (on_eof_) on_eof_();
}

void OutputPump::abandon() {
  abandoned_ = true;
  if (waiting_for_room_) {  // no wait is pending to cancel
    auto& waiting = scratch_.waiting_for_room;
    waiting.erase(std::remove(waiting.begin(), waiting.end(), this), waiting.end());
    return finish();
  }
  boost::system::error_code ignored;
  pipe_.cancel(ignored);
}

}  // namespace ddprun::agent
