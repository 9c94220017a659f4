#include "agent/signal_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <cerrno>
#include <fstream>

#include "common/error.hpp"

namespace ddprun::agent {
namespace {

int open_signalfd(const sigset_t& set) {
  const int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) throw SystemError("signalfd", errno);
  return fd;
}

}  // namespace

SignalReader::SignalReader(boost::asio::io_context& io, const sigset_t& set) : fd_(io, open_signalfd(set)) {}

void SignalReader::start(std::function<void(const ReceivedSignal&)> on_signal) {
  on_signal_ = std::move(on_signal);
  read_next();
}

void SignalReader::cancel() {
  stopped_ = true;
  boost::system::error_code ignored;
  fd_.cancel(ignored);
}

void SignalReader::read_next() {
  // A signalfd yields whole signalfd_siginfo records, one signal each.
  boost::asio::async_read(fd_, boost::asio::buffer(&info_, sizeof info_),
                          [this](const boost::system::error_code& ec, std::size_t) {
                            // Cancelled, or read in the turn in which cancel() came (the job has ended: a
                            // signal now would start a teardown of nothing and change the exit code).
                            if (ec || stopped_) return;
                            ReceivedSignal r;
                            r.signal = static_cast<int>(info_.ssi_signo);
                            r.sender = static_cast<int>(info_.ssi_code) == SI_USER ||
                                               static_cast<int>(info_.ssi_code) == SI_QUEUE ||
                                               static_cast<int>(info_.ssi_code) == SI_TKILL
                                           ? static_cast<pid_t>(info_.ssi_pid)
                                           : 0;
                            on_signal_(r);
                            if (!stopped_) read_next();  // the signal may have finished the agent
                          });
}

std::string process_name(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace ddprun::agent
