#include <doctest/doctest.h>

#include <vector>

#include "common/error.hpp"
#include "rendezvous/framing.hpp"

using namespace ddprun::rendezvous;

TEST_CASE("a frame is a big-endian length followed by the payload") {
  std::string frame = encode_frame("abc");
  CHECK(frame == std::string("\0\0\0\3abc", 7));
}

TEST_CASE("the decoder yields payloads fed one byte at a time") {
  std::string stream = encode_frame("hello") + encode_frame("") + encode_frame("world");
  FrameDecoder decoder;
  std::vector<std::string> got;
  for (char c : stream) {
    decoder.feed(std::string_view(&c, 1));
    while (auto payload = decoder.next()) got.push_back(*payload);
  }
  CHECK(got == std::vector<std::string>{"hello", "", "world"});
  CHECK_FALSE(decoder.mid_frame());
}

TEST_CASE("the decoder yields several payloads fed at once") {
  FrameDecoder decoder;
  decoder.feed(encode_frame("a") + encode_frame("bb"));
  CHECK(decoder.next() == std::optional<std::string>("a"));
  CHECK(decoder.next() == std::optional<std::string>("bb"));
  CHECK(decoder.next() == std::nullopt);
}

TEST_CASE("a truncated frame is reported as mid-frame and never yielded") {
  FrameDecoder decoder;
  decoder.feed(encode_frame("hello").substr(0, 6));
  CHECK(decoder.next() == std::nullopt);
  CHECK(decoder.mid_frame());
}

TEST_CASE("an oversized frame is refused from its header alone") {
  FrameDecoder decoder(16);
  CHECK_THROWS_AS(decoder.feed(std::string("\x7f\xff\xff\xff", 4)), ProtocolError);
}

TEST_CASE("an oversized frame behind a good one is refused when reached") {
  FrameDecoder decoder(16);
  decoder.feed(encode_frame("ok") + std::string("\0\0\1\0", 4));
  CHECK(decoder.next() == std::optional<std::string>("ok"));
  CHECK_THROWS_AS(decoder.next(), ProtocolError);
}

TEST_CASE("raising the limit after a frame admits a larger frame already buffered behind it") {
  // The server's case: a small hello, then (in the same read) a large failure report sent right after it.
  FrameDecoder decoder(16);
  decoder.feed(encode_frame("hello") + encode_frame(std::string(100, 'x')));
  CHECK(decoder.next() == std::optional<std::string>("hello"));
  decoder.set_max_frame_bytes(1024);
  CHECK(decoder.next() == std::optional<std::string>(std::string(100, 'x')));
}

TEST_CASE("the handshake limit fits the largest hello the decoder accepts") {
  std::string longest = R"({"type":"hello","v":1,"run_id":")" + std::string(256, 'r') + R"(","mac":")" +
                        std::string(128, 'f') + R"(","node_rank":1048575,"nproc":65536,"host":")" +
                        std::string(255, 'h') + R"(","address":")" + std::string(255, 'a') +
                        R"(","master_port":65535})";
  CHECK(encode_frame(longest).size() <= kHandshakeMaxFrameBytes);
}

TEST_CASE("encoding a payload over the limit throws") {
  CHECK_THROWS_AS(encode_frame(std::string(17, 'x'), 16), ProtocolError);
}
