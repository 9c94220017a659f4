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

OutputPump::OutputPump(boost::asio::io_context& io, int pipe_fd, PumpTargets targets, std::function<void()> on_eof)
    : pipe_(io, pipe_fd), targets_(std::move(targets)), framer_(targets_.prefix), buffer_(kReadSize),
      on_eof_(std::move(on_eof)) {}

OutputPump::~OutputPump() {
  if (targets_.file_fd >= 0) ::close(targets_.file_fd);
}

void OutputPump::start() { read_next(); }

void OutputPump::read_next() {
  pipe_.async_read_some(boost::asio::buffer(buffer_), [this](const boost::system::error_code& ec, std::size_t n) {
    if (n > 0) deliver(buffer_.data(), n);
    if (ec) {  // eof, or operation_aborted when abandoned
      finish();
      return;
    }
    read_next();
  });
}

void OutputPump::deliver(const char* data, std::size_t n) {
  if (targets_.file_fd >= 0 && !write_all(targets_.file_fd, std::string_view(data, n))) {
    ::close(targets_.file_fd);  // disk full or similar: keep the job and the console going
    targets_.file_fd = -1;
  }
  if (targets_.console_fd < 0 || console_broken_) return;
  out_.clear();
  framer_.feed(data, n, out_);
  if (!out_.empty() && !write_blocking(targets_.console_fd, out_)) console_broken_ = true;
}

void OutputPump::finish() {
  if (finished_) return;
  finished_ = true;
  if (targets_.console_fd >= 0 && !console_broken_) {
    out_.clear();
    framer_.finish(out_);
    if (!out_.empty()) write_blocking(targets_.console_fd, out_);
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
