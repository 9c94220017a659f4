// Forwards one worker stream (stdout or stderr pipe) on the Asio loop: whole prefixed lines to the
// console, raw bytes to a log file, until end of file. Writes are blocking and whole: a forwarded line
// is never split, and a slow console slows the job down rather than losing output.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/line_framer.hpp"
#include "agent/stream_tail.hpp"

namespace ddprun::agent {

struct PumpTargets {
  int console_fd = -1;  // -1: not shown on the console
  int file_fd = -1;     // -1: not kept in a file (owned by the pump once given)
  std::string prefix;   // line prefix for the console
  std::shared_ptr<StreamTail> tail;  // also keeps the stream's last bytes here; null: not kept
};

// Buffers every pump of one agent shares. The loop is single-threaded and a pump reads and forwards in
// one go, so one read buffer and one output buffer serve them all: per-pump buffers cost ~0.5 MiB of
// resident memory per worker (256 KiB read buffer + its prefixed copy, for stdout and stderr each).
struct PumpScratch {
  std::vector<char> read;
  std::string out;
};

class OutputPump {
 public:
  // Takes ownership of `pipe_fd` (the read end) and of targets.file_fd; `scratch` outlives the pump.
  OutputPump(boost::asio::io_context& io, int pipe_fd, PumpTargets targets, PumpScratch& scratch,
             std::function<void()> on_eof);
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  void start();
  bool finished() const { return finished_; }
  // Stops reading (used only if a stream never ends after every process is gone).
  void abandon();

 private:
  void read_next();
  void read_ready();
  void deliver(const char* data, std::size_t n);
  void finish();

  boost::asio::posix::stream_descriptor pipe_;
  PumpTargets targets_;
  LineFramer framer_;  // holds this stream's unfinished line, if any
  PumpScratch& scratch_;
  std::function<void()> on_eof_;
  bool finished_ = false;
  bool console_broken_ = false;
};

// Makes a pipe whose read end is close-on-exec and non-blocking-ready for Asio, and whose write end the
// child gets as stdout/stderr. The pipe is enlarged (1 MiB) so a chatty worker blocks less often.
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
};
Pipe make_output_pipe();

}  // namespace ddprun::agent
