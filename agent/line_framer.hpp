// Turns a worker's byte stream into whole, prefixed lines. Pure (no I/O), so the rules are unit-tested:
// - every complete line is emitted with the prefix in front, in one piece, so the forwarder can write it
//   with one write(2) and two workers' bytes never mix within a line;
// - bytes are passed through untouched (binary included); only a prefix is inserted after each '\n';
// - a line longer than `max_line` is cut there and emitted with a '\n' appended, so one runaway writer
//   cannot grow memory without bound;
// - at end of stream a partial last line is emitted with a '\n' appended;
// - a '\r' not followed by '\n' ends a piece too: it is emitted at once with the prefix and its '\r', so a
//   progress bar that redraws itself with '\r' redraws on the terminal as "[rank0]: bar" (the prefix comes
//   back with every redraw). A '\n' right after such a '\r', even in the next read, completes "\r\n"
//   without a prefix of its own.
//
// Without a prefix the bytes need no copy at all: frame_in_place works on the buffer the read landed in.
#pragma once

#include <cstddef>
#include <string>

namespace ddprun {
class Buffer;  // common/write_queue.hpp
}

namespace ddprun::agent {

class LineFramer {
 public:
  explicit LineFramer(std::string prefix, std::size_t max_line = std::size_t{1} << 20)
      : prefix_(std::move(prefix)), max_line_(max_line) {}

  // Appends the complete lines found in data[0..n) (and any carried-over partial line) to `out`.
  void feed(const char* data, std::size_t n, std::string& out);
  void feed(const char* data, std::size_t n, Buffer& out);
  // Appends the partial last line, if any, terminated with '\n'.
  void finish(std::string& out);
  void finish(Buffer& out);

  // The no-prefix path (the prefix must be empty): `buf` holds partial_size() bytes of room, then the new bytes.
  // The carried partial line is put in that room and the new incomplete line is kept back: `buf` ends up holding
  // exactly what feed() would have appended for the new bytes, without copying them.
  std::size_t partial_size() const { return partial_.size(); }
  void frame_in_place(Buffer& buf);

  bool has_partial() const { return !partial_.empty(); }
  const std::string& prefix() const { return prefix_; }
  // The prefix of the lines emitted from now on (a worker re-formed in place has a new rank).
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

 private:
  void cut_overlong(Buffer& out);

  std::string prefix_;
  std::size_t max_line_;
  std::string partial_;  // never holds a '\n' or a '\r' (either would have ended a piece)
  bool after_cr_ = false;  // the last byte emitted was a piece-ending '\r'
};

// Expands {rank}, {local_rank}, {node_rank}, {role} and {host} (this node's host name, as the summary names
// it) in a prefix format. Returns false (and leaves `out` unspecified) when the format holds an unknown
// {placeholder} or an unbalanced brace.
bool expand_prefix(const std::string& format, int rank, int local_rank, int node_rank, const std::string& role,
                   const std::string& host, std::string& out);

}  // namespace ddprun::agent
