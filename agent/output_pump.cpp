#include "agent/output_pump.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "common/log.hpp"

namespace ddprun::agent {
namespace {
constexpr std::size_t kReadSize = 256 * 1024;

// write_all, but tolerant of a console fd that someone left non-blocking: wait until it drains.
bool write_blocking(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}
}  // namespace

Pipe make_output_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
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
  if (targets_.file_fd >= 0) ::close(targets_.file_fd);
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
      return read_next();  // one read per wake-up: a flooding worker does not starve the others
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return read_next();
    return finish();  // end of file (every writer gone), or a read error
  }
}

void OutputPump::deliver(const char* data, std::size_t n) {
  if (targets_.tail) targets_.tail->add(data, n);
  if (targets_.file_fd >= 0 && !write_all(targets_.file_fd, std::string_view(data, n))) {
    ::close(targets_.file_fd);  // disk full or similar: keep the job and the console going
    targets_.file_fd = -1;
  }
  if (targets_.console_fd < 0 || console_broken_) return;
  std::string& out = scratch_.out;
  out.clear();
  framer_.feed(data, n, out);
  if (!out.empty() && !write_blocking(targets_.console_fd, out)) console_broken_ = true;
}

void OutputPump::finish() {
  if (finished_) return;
  finished_ = true;
  if (targets_.console_fd >= 0 && !console_broken_) {
    std::string& out = scratch_.out;
    out.clear();
    framer_.finish(out);
    if (!out.empty()) write_blocking(targets_.console_fd, out);
  }
  boost::system::error_code ignored;
  pipe_.close(ignored);
  if (on_eof_) on_eof_();
}

void OutputPump::abandon() {
  boost::system::error_code ignored;
  pipe_.cancel(ignored);
}

}  // namespace ddprun::agent
