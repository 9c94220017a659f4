// The seal every frame after the hello carries (rendezvous/frame_seal.hpp, issue 55): what one end seals the other
// opens, in order, once; a changed, replayed, dropped or reordered frame, a frame of the other direction, of another
// connection or another token does not open. The Python side of the same wire (tests/support/rdzv_wire.py) is checked
// against it through the server in the integration tests.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "rendezvous/frame_seal.hpp"
#include "rendezvous/framing.hpp"

using namespace ddprun::rendezvous;

namespace {
// The agent-to-server seal of a connection (token, the server's nonce; the agent's "bb", run "run"). FrameSeal is
// not copyable: each use makes its own.
std::unique_ptr<FrameSeal> agent_side(const std::string& token = "tok", const std::string& server_nonce = "aa") {
  return std::make_unique<FrameSeal>(token, server_nonce, "bb", "run", FrameSeal::Direction::kAgentToServer);
}
}  // namespace

TEST_CASE("a sealed frame opens once, in order, and only as sealed") {
  auto out = agent_side();
  auto in = agent_side();
  std::string first = out->seal(R"({"type":"heartbeat"})");
  std::string second = out->seal(R"({"type":"node_done"})");
  CHECK(first.size() == 20 + kSealTagBytes);
  std::string opened = first;
  REQUIRE(in->open(opened));
  CHECK(opened == R"({"type":"heartbeat"})");
  std::string replayed = first;  // the same frame again: its sequence has passed
  CHECK_FALSE(in->open(replayed));
  CHECK(replayed == first);  // untouched, and the sequence not advanced: the next one still opens
  std::string changed = second;
  changed[10] = 'X';
  CHECK_FALSE(in->open(changed));
  opened = second;
  CHECK(in->open(opened));
  CHECK(opened == R"({"type":"node_done"})");
  std::string short_frame = "abc";
  CHECK_FALSE(in->open(short_frame));
}

TEST_CASE("a dropped or reordered frame fails; so does one of the other direction, connection or token") {
  auto out = agent_side();
  auto in = agent_side();
  out->seal("one");  // dropped on the way
  std::string two = out->seal("two");
  CHECK_FALSE(in->open(two));
  FrameSeal back("tok", "aa", "bb", "run", FrameSeal::Direction::kServerToAgent);
  auto fresh_in = agent_side();
  std::string reflected = back.seal("x");  // the server's own frame sent back to it
  CHECK_FALSE(fresh_in->open(reflected));
  auto other_connection = agent_side("tok", "ab");
  std::string elsewhere = other_connection->seal("x");
  CHECK_FALSE(agent_side()->open(elsewhere));
  auto other_token = agent_side("tok2");
  std::string forged = other_token->seal("x");
  CHECK_FALSE(agent_side()->open(forged));
}

TEST_CASE("seal_frame re-frames a whole frame with its tag, and the decoder hands out the sealed payload") {
  auto out = agent_side();
  auto in = agent_side();
  const std::string plain = encode_frame(R"({"type":"heartbeat"})");
  FrameDecoder decoder(64);
  decoder.feed(seal_frame(*out, plain));
  decoder.feed(seal_frame(*out, plain));
  for (int i = 0; i < 2; ++i) {
    auto payload = decoder.next();
    REQUIRE(payload);
    REQUIRE(in->open(*payload));
    CHECK(*payload == R"({"type":"heartbeat"})");
  }
}
