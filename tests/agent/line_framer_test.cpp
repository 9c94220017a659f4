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
  CHECK(expand_prefix("[{role}{local_rank}|{rank}@{node_rank}]", 5, 1, 2, "trainer", out));
  CHECK(out == "[trainer1|5@2]");
  CHECK_FALSE(expand_prefix("{host}", 0, 0, 0, "r", out));
  CHECK_FALSE(expand_prefix("{rank", 0, 0, 0, "r", out));
  CHECK_FALSE(expand_prefix("rank}", 0, 0, 0, "r", out));
  CHECK(expand_prefix("", 0, 0, 0, "r", out));
  CHECK(out.empty());
}
