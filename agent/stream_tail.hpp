// The last bytes a worker wrote on a stream, bounded, kept for the exit summary: a worker that fails
// without an error file (no @record, an import at start-up, argparse) explains itself on stderr, and its
// traceback's end is what the summary shows (agent/error_file.hpp, read_stderr_end).
#pragma once

#include <cstddef>
#include <string>

namespace ddprun::agent {

class StreamTail {
 public:
  explicit StreamTail(std::size_t limit) : limit_(limit) {}

  void add(const char* data, std::size_t n) {
    if (n >= limit_) {
      from_start_ = from_start_ && n == limit_ && text_.empty();
      text_.assign(data + (n - limit_), limit_);
      return;
    }
    if (text_.size() + n > limit_) {
      text_.erase(0, text_.size() + n - limit_);
      from_start_ = false;
    }
    text_.append(data, n);
  }
  const std::string& text() const { return text_; }
  // Whether text() is all the stream ever carried (else its first line may be partial).
  bool from_start() const { return from_start_; }

 private:
  std::size_t limit_;
  std::string text_;
  bool from_start_ = true;
};

}  // namespace ddprun::agent
