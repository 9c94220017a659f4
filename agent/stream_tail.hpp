// The last bytes a worker wrote on a stream, bounded, kept for the exit summary: a Python worker that
// fails at start-up (an import) writes no error file, and its stderr's last line is what explains it.
#pragma once

#include <cstddef>
#include <string>

namespace ddprun::agent {

class StreamTail {
 public:
  explicit StreamTail(std::size_t limit) : limit_(limit) {}

  void add(const char* data, std::size_t n) {
    if (n >= limit_) {
      text_.assign(data + (n - limit_), limit_);
      return;
    }
    if (text_.size() + n > limit_) text_.erase(0, text_.size() + n - limit_);
    text_.append(data, n);
  }
  const std::string& text() const { return text_; }

 private:
  std::size_t limit_;
  std::string text_;
};

}  // namespace ddprun::agent
