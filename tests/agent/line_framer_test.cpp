#include <doctest/doctest.h>

#include <string>

#include "agent/line_framer.hpp"

using ddprun::agent::expand_prefix;
using ddprun::agent::LineFramer;

TEST_CASE("complete lines get the prefix, each in one piece") {
  LineFramer f("[r1]: ");
  std::string out;
  const std::string in = "a\nbb\n";
  f.feed(in.data(), in.size(), out);
  CHECK(out == "[r1]: a\n[r1]: bb\n");
}

TEST_CASE("a line split across reads is emitted once, when complete") {
  LineFramer f("P ");
  std::string out;
  f.feed("hel", 3, out);
  CHECK(out.empty());
  CHECK(f.has_partial());
  f.feed("lo\nwor", 6, out);
  CHECK(out == "P hello\n");
  out.clear();
  f.feed("ld\n", 3, out);
  CHECK(out == "P world\n");
}

TEST_CASE("a partial last line is flushed at end of stream with a newline added") {
  LineFramer f("P ");
  std::string out;
  f.feed("x\ntail", 6, out);
  f.finish(out);
  CHECK(out == "P x\nP tail\n");
  std::string again;
  f.finish(again);
  CHECK(again.empty());
}

TEST_CASE("binary bytes pass through untouched") {
  std::string in;
  for (int b = 0; b < 256; ++b) in.push_back(static_cast<char>(b));
  LineFramer f("");
  std::string out;
  f.feed(in.data(), in.size(), out);
  f.finish(out);
  CHECK(out == in + "\n");
}

TEST_CASE("an over-long line is cut at the limit so memory stays bounded") {
  LineFramer f(">", 4);
  std::string out;
  f.feed("abcdefghij", 10, out);
  CHECK(out == ">abcd\n>efgh\n");
  f.finish(out);
  CHECK(out == ">abcd\n>efgh\n>ij\n");
}

TEST_CASE("prefix formats expand the documented placeholders and reject others") {
  std::string out;
  CHECK(expand_prefix("[{role}{local_rank}|{rank}@{node_rank}]", 5, 1, 2, "trainer", "gpu7", out));
  CHECK(out == "[trainer1|5@2]");
  CHECK(expand_prefix("{host}:{rank}> ", 5, 1, 2, "trainer", "gpu7", out));
  CHECK(out == "gpu7:5> ");
  CHECK_FALSE(expand_prefix("{hostname}", 0, 0, 0, "r", "h", out));
  CHECK_FALSE(expand_prefix("{rank", 0, 0, 0, "r", "h", out));
  CHECK_FALSE(expand_prefix("rank}", 0, 0, 0, "r", "h", out));
  CHECK(expand_prefix("", 0, 0, 0, "r", "h", out));
  CHECK(out.empty());
}

TEST_CASE("a carriage return ends a piece at once, so a redrawn progress bar keeps its prefix") {
  LineFramer f("[rank0]: ");
  std::string out;
  f.feed("bar 1\r", 6, out);
  CHECK(out == "[rank0]: bar 1\r");
  f.feed("bar 2\rbar 3\rdone\n", 17, out);
  CHECK(out == "[rank0]: bar 1\r[rank0]: bar 2\r[rank0]: bar 3\r[rank0]: done\n");
  CHECK_FALSE(f.has_partial());
}

TEST_CASE("\"\\r\\n\" stays one line end, also when split across reads") {
  LineFramer f("P ");
  std::string out;
  f.feed("a\r\nb\r", 5, out);
  CHECK(out == "P a\r\nP b\r");
  f.feed("\nc\n", 3, out);
  CHECK(out == "P a\r\nP b\r\nP c\n");
  out.clear();
  f.feed("x\r", 2, out);
  f.feed("y\n", 2, out);  // a '\r' followed by something else: the next piece gets its prefix
  CHECK(out == "P x\rP y\n");
}
