// The framer's fast paths (agent/line_framer.cpp: prefixed lines 16 bytes at a time, the no-prefix bulk and
// in-place paths) against the rules written plainly: a byte-at-a-time reference framer, fed the same random
// streams cut at random places. Streams mix '\n', '\r', "\r\n", long and empty lines, so every path and every
// hand-over between them is taken.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "agent/line_framer.hpp"
#include "common/write_queue.hpp"

using ddprun::Buffer;
using ddprun::agent::LineFramer;

namespace {

// agent/line_framer.hpp's rules, one byte at a time.
class Reference {
 public:
  Reference(std::string prefix, std::size_t max_line) : prefix_(std::move(prefix)), max_line_(max_line) {}
  void feed(const std::string& data, std::string& out) {
    std::size_t i = 0;
    if (!data.empty() && after_cr_ && line_.empty() && data[0] == '\n') {
      out += '\n';
      i = 1;
    }
    if (!data.empty()) after_cr_ = false;
    for (; i < data.size(); ++i) {
      const char c = data[i];
      line_ += c;
      const bool cr_end = c == '\r' && (i + 1 == data.size() || data[i + 1] != '\n');
      if (c == '\n' || cr_end) {
        out += prefix_ + line_;
        line_.clear();
        after_cr_ = cr_end;
      }
    }
    while (line_.size() >= max_line_) {
      out += prefix_ + line_.substr(0, max_line_) + "\n";
      line_.erase(0, max_line_);
    }
  }
  void finish(std::string& out) {
    if (!line_.empty()) out += prefix_ + line_ + "\n";
    line_.clear();
  }

 private:
  std::string prefix_;
  std::size_t max_line_;
  std::string line_;
  bool after_cr_ = false;
};

std::string random_stream(std::mt19937& rng, std::size_t size) {
  static const char* const kPieces[] = {"\n", "\r", "\r\n", "a", "bcdefghij", "0123456789abcdefghijklmnopqrstu",
                                        "x\n", "progress 42%\r", "\0\xff", "y"};
  std::string s;
  std::uniform_int_distribution<int> pick(0, 9);
  std::uniform_int_distribution<int> run(1, 40);
  while (s.size() < size) {
    const int p = pick(rng);
    const int times = p == 3 || p == 9 ? run(rng) : 1;  // long lines now and then
    for (int t = 0; t < times; ++t) s += p == 8 ? std::string("\0\xff", 2) : std::string(kPieces[p]);
  }
  return s;
}

std::vector<std::string> random_cuts(std::mt19937& rng, const std::string& s) {
  std::vector<std::string> chunks;
  std::uniform_int_distribution<std::size_t> len(0, 200);
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t n = std::min(len(rng), s.size() - pos);
    chunks.push_back(s.substr(pos, n));
    pos += n;
  }
  return chunks;
}

}  // namespace

TEST_CASE("the fast paths emit exactly what the rules say, for any stream cut anywhere") {
  std::mt19937 rng(20261128);
  for (const std::string prefix : {"", "P", "[rank0]: ", "0123456789abcdef", "[a much longer prefix, 30 b]: "}) {
    for (const std::size_t max_line : {std::size_t{7}, std::size_t{64}, std::size_t{1} << 20}) {
      for (int round = 0; round < 20; ++round) {
        const std::string stream = random_stream(rng, 3000);
        const auto chunks = random_cuts(rng, stream);
        Reference ref(prefix, max_line);
        LineFramer framer(prefix, max_line);
        std::string want, got;
        for (const std::string& c : chunks) {
          ref.feed(c, want);
          Buffer out;
          framer.feed(c.data(), c.size(), out);
          got.append(out.data(), out.size());
        }
        ref.finish(want);
        framer.finish(got);
        REQUIRE_MESSAGE(got == want, "prefix '", prefix, "', max_line ", max_line, ", round ", round);
      }
    }
  }
}

TEST_CASE("framing in place (no prefix) leaves in the read buffer what feed would have emitted") {
  std::mt19937 rng(7);
  for (const std::size_t max_line : {std::size_t{5}, std::size_t{1} << 20}) {
    for (int round = 0; round < 40; ++round) {
      const std::string stream = random_stream(rng, 2000);
      Reference ref("", max_line);
      LineFramer framer("", max_line);
      std::string want, got;
      for (const std::string& c : random_cuts(rng, stream)) {
        ref.feed(c, want);
        Buffer buf = Buffer::take(framer.partial_size() + c.size());
        buf.resize(framer.partial_size() + c.size());
        if (!c.empty()) std::memcpy(buf.data() + framer.partial_size(), c.data(), c.size());  // a read(2) into it
        framer.frame_in_place(buf);
        got.append(buf.data(), buf.size());
      }
      ref.finish(want);
      framer.finish(got);
      REQUIRE_MESSAGE(got == want, "max_line ", max_line, ", round ", round);
    }
  }
}

TEST_CASE("a Buffer grows without losing its bytes and comes back from the pool empty") {
  Buffer b;
  for (int i = 0; i < 1000; ++i) b.append("0123456789", 10);
  b.push_back('!');
  REQUIRE(b.size() == 10001);
  CHECK(b.view().substr(9990) == "0123456789!");
  // Reserving a little more each time (the framer does, a line at a time) grows geometrically: a flood of short
  // lines once reallocated at every line, quadratic, and held the loop for seconds.
  const std::size_t before = b.capacity();
  b.reserve(before + 1);
  CHECK(b.capacity() >= before + before / 2);
  Buffer big = Buffer::take(1 << 20);
  CHECK(big.empty());
  CHECK(big.capacity() >= (1u << 20));
  big.append("x", 1);
  Buffer::recycle(std::move(big));
  Buffer again = Buffer::take(100);
  CHECK(again.empty());
}
