#include "tests/rendezvous/fuzz_mutate.hpp"

#include <limits>

#include "rendezvous/protocol.hpp"
#include "tests/rendezvous/sample_messages.hpp"

namespace ddprun::rendezvous::fuzz {

using nlohmann::json;

namespace {

std::size_t below(Rng& rng, std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); }

// Values at the edges of every range the decoder checks, and of the types it could be confused by.
json interesting_value(Rng& rng) {
  static const std::vector<json> values = {
      0, 1, -1, 2, 63, 64, 65, 127, 128, 255, 256, 65535, 65536, 1 << 20, (1 << 20) - 1, (1 << 30) - 1, 1 << 30,
      std::numeric_limits<int>::max(), std::numeric_limits<int>::min(), std::numeric_limits<std::int64_t>::max(),
      std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::uint64_t>::max(), 4194304, 4194305,
      1.5, -0.0, 1e308, nullptr, true, false, "", "0", "-1", "ab", "00ff", "a b", "x\ny", "\xff\xfe", "job42",
      json::array(), json::array({1}), json::array({json::array({4, 2})}), json::array({json::array({-1, 3})}),
      json::object(), json{{"rank", 1}}, std::string(300, 'h'), std::string(5000, 'a')};
  return values[below(rng, values.size())];
}

// A pointer to a random value inside `j` (the root included).
json* random_node(Rng& rng, json& j) {
  json* node = &j;
  for (int depth = 0; depth < 4 && (node->is_object() || node->is_array()) && !node->empty(); ++depth) {
    if (below(rng, 3) == 0) break;
    auto it = node->begin();
    std::advance(it, static_cast<std::ptrdiff_t>(below(rng, node->size())));
    node = &*it;
  }
  return node;
}

}  // namespace

std::string random_bytes(Rng& rng, std::size_t max_length) {
  std::string out(below(rng, max_length + 1), '\0');
  for (char& c : out) c = static_cast<char>(below(rng, 256));
  return out;
}

std::vector<std::string> seed_payloads() {
  std::vector<std::string> out;
  HelloMsg hello;
  hello.run_id = "job42";
  hello.mac = std::string(64, 'a');
  hello.nproc = 4;
  hello.host = "gpu7";
  hello.master_port = 29500;
  out.push_back(encode(ClientMessage{hello}));
  hello.node_rank = 3;
  hello.address = "10.0.0.7";
  out.push_back(encode(ClientMessage{hello}));
  const Failure worker = testing::sample_failure();
  out.push_back(encode(ClientMessage{FailureMsg{worker}}));
  Failure node;
  node.kind = FailureKind::kAgentStopped;
  node.node_rank = 2;
  node.signal = 15;
  node.message = "its ddprun received SIGTERM";
  out.push_back(encode(ClientMessage{FailureMsg{node}}));
  for (const ClientMessage& m : {ClientMessage{HeartbeatMsg{}}, ClientMessage{NodeDoneMsg{}}, ClientMessage{StoppedMsg{}}})
    out.push_back(encode(m));
  ChallengeMsg challenge;
  challenge.nonce = std::string(32, 'f');
  challenge.heartbeat_interval_ms = 1000;
  challenge.heartbeat_timeout_ms = 5000;
  out.push_back(encode(ServerMessage{challenge}));
  out.push_back(encode(ServerMessage{ErrorMsg{ErrorKind::kTimeout, "rendezvous timed out"}}));
  out.push_back(encode_assignment(encode_round(make_round({4, 4, 2, 4}, "10.0.0.1", 29500, "job42", 1, 3)), 2, 8));
  out.push_back(encode_assignment(encode_round(make_round({1}, "n0", 1, "j", 0, 0)), 0, 0));
  out.push_back(encode(ServerMessage{StopMsg{worker, "a worker failed", false}}));
  out.push_back(encode(ServerMessage{StopMsg{node, "a node was lost", true}}));
  for (const ServerMessage& m : {ServerMessage{HeartbeatAckMsg{}}, ServerMessage{CompleteMsg{}}})
    out.push_back(encode(m));
  // The message types added since the fuzzer was written (issue 33): a resume claim and a return after a round,
  // a hang view, a status with paces, a view request; the server's capture, job view, stragglers, deferral,
  // and the stop of a membership change and of a dropped node.
  // ... and the seat (issue 33): a commitment in the hello, the secret in the claim.
  hello.seat = std::string(64, 'c');
  hello.resume = ResumeClaim{2, 1, 3, 4, 12, "10.0.0.1", 29500, nprocs_fingerprint({4, 4, 4}), std::string(64, '5')};
  out.push_back(encode(ClientMessage{hello}));
  hello.seat.clear();
  hello.resume.reset();
  hello.after_round = 2;
  out.push_back(encode(ClientMessage{hello}));
  HangViewMsg view;
  view.suspect = true;
  RankBeat beat;
  beat.rank = 5;
  beat.local_rank = 1;
  beat.pid = 4242;
  beat.step = 88;
  beat.silent_ms = 31'000;
  beat.hung = beat.python_stack = beat.stopped = beat.slow = true;
  beat.collective = "all_reduce";
  view.ranks = {beat, RankBeat{}};
  view.stacks = "/tmp/ddprun-job/attempt_0/stacks.txt";
  out.push_back(encode(ClientMessage{view}));
  out.push_back(encode(ClientMessage{NodeStatusMsg{R"({"host":"gpu7","ranks":[{"rank":5,"step":88}]})",
                                                   {RankPace{4, 80'000, 60'000}, RankPace{5, 81'000, -1}}}}));
  out.push_back(encode(ClientMessage{ViewRequestMsg{}}));
  out.push_back(encode(ClientMessage{ProveMsg{std::string(32, 'a')}}));  // the connection's proof, asked and given
  out.push_back(encode(ServerMessage{ProofMsg{std::string(64, 'b')}}));
  out.push_back(encode(ServerMessage{CaptureMsg{}}));
  out.push_back(encode(ServerMessage{JobViewMsg{{R"({"host":"gpu7"})", "{}"}, {12, 4000}}}));
  out.push_back(encode(ServerMessage{StragglersMsg{{Straggler{5, 1, "gpu7", 120'000, 80'000, true}}}}));
  out.push_back(encode(ServerMessage{HangDeferredMsg{{0, 3}, 9000, {}}}));
  out.push_back(encode(ServerMessage{MeetMsg{4}}));
  StopMsg joined{Failure{}, "a node joined", true, true};
  out.push_back(encode(ServerMessage{joined}));
  StopMsg dropped{node, "dropped from round 1", false, false, true};
  out.push_back(encode(ServerMessage{dropped}));
  return out;
}

std::string mutate_bytes(Rng& rng, std::string s, const std::vector<std::string>& corpus) {
  static const std::vector<std::string> tokens = {
      "-1", "256", "2147483647", "-2147483648", "9223372036854775807", "18446744073709551616", "1e999", "null",
      "true", "[]", "{}", "\"\"", "\\u0000", "\\ud800", "\"", "\\", ",", ":", "[[[[[[[[[[[[[[[[[[", "}}}}", "\xff"};
  const int edits = 1 + static_cast<int>(below(rng, 4));
  for (int e = 0; e < edits; ++e) {
    const std::size_t at = below(rng, s.size() + 1);
    switch (below(rng, 8)) {
      case 0: if (!s.empty()) s[below(rng, s.size())] ^= static_cast<char>(1 << below(rng, 8)); break;
      case 1: if (!s.empty()) s[below(rng, s.size())] = static_cast<char>(below(rng, 256)); break;
      case 2: s.insert(at, tokens[below(rng, tokens.size())]); break;
      case 3: s.erase(at, below(rng, 16)); break;
      case 4: if (at < s.size()) s.insert(at, s.substr(at, below(rng, 32))); break;
      case 5: {  // splice the tail of another seed
        const std::string& other = corpus[below(rng, corpus.size())];
        s = s.substr(0, at) + other.substr(below(rng, other.size() + 1));
        break;
      }
      case 6: s.resize(at); break;
      default: s.insert(at, random_bytes(rng, 8)); break;
    }
  }
  return s;
}

std::string mutate_json(Rng& rng, const std::string& input) {
  json j = json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return input;
  const int edits = 1 + static_cast<int>(below(rng, 2));
  for (int e = 0; e < edits; ++e) {
    json* node = random_node(rng, j);
    switch (below(rng, 4)) {
      case 0:  // remove a key
        if (node->is_object() && !node->empty()) {
          auto it = node->begin();
          std::advance(it, static_cast<std::ptrdiff_t>(below(rng, node->size())));
          node->erase(it);
        }
        break;
      case 1:  // add (or overwrite) a key with a boundary value
        if (node->is_object()) {
          static const char* keys[] = {"type", "rank", "signal", "exit_code", "node_rank", "master_port", "extra"};
          (*node)[keys[below(rng, 7)]] = interesting_value(rng);
        }
        break;
      default: *node = interesting_value(rng); break;
    }
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ddprun::rendezvous::fuzz
