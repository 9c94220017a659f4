// Forwards one worker stream (stdout or stderr pipe) on the Asio loop: whole prefixed lines to the
// console, raw bytes to a log file, until end of file. Both are queues written by threads of their own
// (common/console.hpp, common/write_queue.hpp), which never block the loop: while one is congested (a
// paused terminal, a full `| less`, a log file system that stopped answering) the pump stops reading its
// pipe, so the worker blocks in its own write, and reading resumes when there is room. A line is never
// split, never lost while the reader lives, and a slow console or disk slows the workers, not supervision.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/line_framer.hpp"
#include "agent/stream_tail.hpp"
#include "common/write_queue.hpp"

namespace ddprun::agent {

// A log file's write failed (disk full, quota, I/O error): the rest is dropped, the job goes on.
struct FileWriteFailure {
  std::string path;
  int error = 0;
  std::uint64_t bytes_written = 0;  // what the file holds
  bool never_opened = false;        // it could not even be created
};

struct PumpTargets {
  int console_fd = -1;  // -1: not shown on the console
  std::shared_ptr<WriteQueue> file;  // null: not kept in a file; finished by the pump at end of file
  std::string prefix;   // line prefix for the console
  std::shared_ptr<StreamTail> tail;  // also keeps the stream's last bytes here; null: not kept
  int local_rank = -1;  // whose stream: the worker's prefix changes when it re-forms in place
};

// What every pump of one agent shares. The loop is single-threaded and a pump reads and forwards in one go,
// so one read buffer serves the streams that keep no copy of their bytes (per-pump buffers cost resident
// memory per worker); the buffers queued for the console and log files come from Buffer::take's small pool.
class OutputPump;
struct PumpScratch {
  Buffer read;
  std::vector<OutputPump*> waiting_for_room;  // pumps paused by a congested console or file, in pause order
};


class OutputPump {
 public:
  // Takes ownership of `pipe_fd` (the read end); `scratch` outlives the pump. `on_eof` is called when the stream
  // ends, and when it begins to wait for room on a congested console or file: the owner looks again at what
  // waits on its streams (a restart waits for neither).
  OutputPump(boost::asio::io_context& io, int pipe_fd, PumpTargets targets, PumpScratch& scratch,
             std::function<void()> on_eof);
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  void start();
  bool finished() const { return finished_; }
  int local_rank() const { return targets_.local_rank; }
  void set_prefix(std::string prefix) { framer_.set_prefix(std::move(prefix)); }
  // Waiting for room on the console or in its log file's queue, not for the worker: the drain limit does
  // not apply.
  bool waiting_for_room() const { return waiting_for_room_; }
  // Reads again after the console or a file made room (the agent calls it for every pump in
  // PumpScratch::waiting_for_room).
  void resume();
  // Stops reading and finishes (a stream that never ends after every process is gone, or output the
  // user gave up waiting for).
  void abandon();

 private:
  void read_next();
  void read_ready();
  void deliver(const char* data, std::size_t n, Buffer&& raw, bool in_place);
  void finish();

  boost::asio::posix::stream_descriptor pipe_;
  PumpTargets targets_;
  LineFramer framer_;  // holds this stream's unfinished line, if any
  PumpScratch& scratch_;
  std::function<void()> on_eof_;
  bool finished_ = false;
  bool waiting_for_room_ = false;
  bool abandoned_ = false;  // a handler already on its way finishes instead of reading
};

// Makes a pipe whose read end is close-on-exec and non-blocking-ready for Asio, and whose write end the
// child gets as stdout/stderr. The pipe is enlarged (1 MiB) so a chatty worker blocks less often.
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
};
Pipe make_output_pipe();

}  // namespace ddprun::agent
