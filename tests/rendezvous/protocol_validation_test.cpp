// Every field a peer sends is checked in the decoder: out of range, too long or odd characters is a
// ProtocolError (that connection closes). One case per field, each with the edge that is still accepted.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "rendezvous/protocol.hpp"

using namespace ddprun::rendezvous;
using nlohmann::json;

namespace {

json worker_failure() {
  return json{{"kind", "exited"}, {"node_rank", 1}, {"host", "gpu7"}, {"rank", 5},     {"local_rank", 1},
              {"pid", 4242},    {"exit_code", 3}, {"time_unix_ms", 1700000000123}};
}

json hello() {
  return json{{"type", "hello"}, {"v", 1},       {"run_id", "job"},    {"mac", std::string(64, 'a')},
              {"nproc", 2},      {"host", "h-1"}, {"master_port", 29500}};
}

// The failure report `failure` with `key` set to `value` (null: removed).
std::string failure_with(const char* key, const json& value) {
  json f = worker_failure();
  if (value.is_null()) f.erase(key);
  else f[key] = value;
  return json{{"type", "failure"}, {"failure", f}}.dump();
}

std::string hello_with(const char* key, const json& value) {
  json h = hello();
  if (value.is_null()) h.erase(key);
  else h[key] = value;
  return h.dump();
}

// True if the decoder takes the payload, false on a ProtocolError (anything else fails the test).
template <typename Message>
bool decodes(Message (*decode)(std::string_view), const std::string& payload) {
  try {
    decode(payload);
    return true;
  } catch (const ProtocolError&) {
    return false;
  }
}
bool accepted(const std::string& payload) { return decodes(&decode_client_message, payload); }
bool server_accepted(const std::string& payload) { return decodes(&decode_server_message, payload); }

}  // namespace

TEST_CASE("a failure's exit code is 0..255: 256 would make ddprun exit 0") {
  CHECK(accepted(failure_with("exit_code", 255)));
  CHECK(accepted(failure_with("exit_code", 0)));
  CHECK_FALSE(accepted(failure_with("exit_code", 256)));
  CHECK_FALSE(accepted(failure_with("exit_code", -1)));
  CHECK_FALSE(accepted(failure_with("exit_code", 4294967296LL)));
  CHECK_FALSE(accepted(failure_with("exit_code", "1")));
}

TEST_CASE("a failure's signal is 1..64: 2147483647 would overflow 128 + signal") {
  json f = worker_failure();
  f.erase("exit_code");
  auto with_signal = [&](const json& sig) {
    json g = f;
    g["kind"] = "signaled";
    g["signal"] = sig;
    return json{{"type", "failure"}, {"failure", g}}.dump();
  };
  CHECK(accepted(with_signal(9)));
  CHECK(accepted(with_signal(64)));
  CHECK_FALSE(accepted(with_signal(0)));
  CHECK_FALSE(accepted(with_signal(65)));
  CHECK_FALSE(accepted(with_signal(2147483647)));
  CHECK_FALSE(accepted(with_signal(-9)));
  CHECK_FALSE(accepted(failure_with("signal", 9)));  // both an exit code and a signal
}

TEST_CASE("a failure's ranks are >= 0 for a worker, both -1 for a node, never a mix") {
  CHECK_FALSE(accepted(failure_with("rank", -1)));        // a worker's exit code reported as a lost node
  CHECK_FALSE(accepted(failure_with("rank", -2)));
  CHECK_FALSE(accepted(failure_with("local_rank", -1)));
  CHECK_FALSE(accepted(failure_with("node_rank", -2)));
  CHECK_FALSE(accepted(failure_with("rank", 1 << 30)));
  json node = worker_failure();  // the agent's own signal: rank and local rank -1, a signal, no exit code
  node["rank"] = node["local_rank"] = -1;
  node["kind"] = "agent_stopped";
  node.erase("exit_code");
  node["signal"] = 15;
  CHECK(accepted(json{{"type", "failure"}, {"failure", node}}.dump()));
  node["exit_code"] = 1;
  node.erase("signal");
  CHECK_FALSE(accepted(json{{"type", "failure"}, {"failure", node}}.dump()));
}

TEST_CASE("a failure's kind is one of the known words, and holds what that kind needs") {
  CHECK_FALSE(accepted(failure_with("kind", nullptr)));
  CHECK_FALSE(accepted(failure_with("kind", "crashed")));
  CHECK_FALSE(accepted(failure_with("kind", "signaled")));   // a worker's exit code, called a signal
  CHECK_FALSE(accepted(failure_with("kind", "node_lost")));  // a worker's exit code, called a lost node
  CHECK_FALSE(accepted(failure_with("kind", "hung")));       // a hung worker was killed by a signal
  json hung = worker_failure();
  hung["kind"] = "hung";
  hung.erase("exit_code");
  hung["signal"] = 9;
  CHECK(accepted(json{{"type", "failure"}, {"failure", hung}}.dump()));
  json lost = worker_failure();
  lost["kind"] = "node_lost";
  lost["rank"] = lost["local_rank"] = -1;
  lost.erase("exit_code");
  CHECK(accepted(json{{"type", "failure"}, {"failure", lost}}.dump()));
  lost["signal"] = 15;  // a node whose ddprun got a signal is agent_stopped, not lost
  CHECK_FALSE(accepted(json{{"type", "failure"}, {"failure", lost}}.dump()));
}

TEST_CASE("a worker's failure needs an exit code or a signal") {
  CHECK_FALSE(accepted(failure_with("exit_code", nullptr)));
}

TEST_CASE("a failure's pid and time are bounded") {
  CHECK(accepted(failure_with("pid", 4194304)));
  CHECK_FALSE(accepted(failure_with("pid", 4194305)));
  CHECK_FALSE(accepted(failure_with("pid", -1)));
  CHECK_FALSE(accepted(failure_with("time_unix_ms", -1)));
  CHECK_FALSE(accepted(failure_with("time_unix_ms", 1LL << 60)));
}

TEST_CASE("a failure's strings are bounded, and its host is a host name") {
  CHECK(accepted(failure_with("host", "")));
  CHECK(accepted(failure_with("host", std::string(255, 'h'))));
  CHECK_FALSE(accepted(failure_with("host", std::string(256, 'h'))));
  CHECK_FALSE(accepted(failure_with("host", "gpu7\n[rank 0] fake log line")));
  CHECK_FALSE(accepted(failure_with("host", "a\"b")));
  CHECK(accepted(failure_with("message", std::string(kMaxMessageBytes, 'm'))));
  CHECK_FALSE(accepted(failure_with("message", std::string(kMaxMessageBytes + 1, 'm'))));
  CHECK_FALSE(accepted(failure_with("error_file_contents", std::string(3 * kMaxErrorFileBytes + 65, 'e'))));
}

TEST_CASE("a hello's fields are bounded") {
  CHECK(accepted(hello().dump()));
  CHECK_FALSE(accepted(hello_with("run_id", std::string(kMaxRunIdBytes + 1, 'r'))));
  CHECK_FALSE(accepted(hello_with("mac", "not hex")));
  CHECK_FALSE(accepted(hello_with("mac", std::string(kMaxHexBytes + 2, 'a'))));
  CHECK_FALSE(accepted(hello_with("node_rank", -1)));
  CHECK_FALSE(accepted(hello_with("node_rank", kMaxNodes)));
  CHECK(accepted(hello_with("node_rank", kMaxNodes - 1)));
  CHECK_FALSE(accepted(hello_with("nproc", -1)));
  CHECK_FALSE(accepted(hello_with("nproc", kMaxNproc + 1)));
  CHECK(accepted(hello_with("master_port", 0)));  // 0: none offered (then it cannot be node 0)
  CHECK(accepted(hello_with("master_port", 65535)));
  CHECK_FALSE(accepted(hello_with("master_port", 65536)));
  CHECK_FALSE(accepted(hello_with("master_port", -1)));
  CHECK_FALSE(accepted(hello_with("host", "evil host")));
  CHECK(accepted(hello_with("address", "fe80::1%eth0")));
  CHECK_FALSE(accepted(hello_with("address", "10.0.0.1\r\n")));
  CHECK_FALSE(accepted(hello_with("address", std::string(300, '1'))));
  CHECK_FALSE(accepted(hello_with("v", -1)));
}

namespace {
std::string round_with(const char* key, const json& value, int node_rank = 1, int rank_offset = 4) {
  json round{{"nnodes", 2},         {"world_size", 8},  {"nprocs_runs", json::array({json::array({4, 2})})},
             {"master_addr", "n0"}, {"master_port", 29500}, {"run_id", "job"}, {"restart_count", 0},
             {"max_restarts", 1}};
  round[key] = value;
  return encode_assignment(round.dump(), node_rank, rank_offset);
}
}  // namespace

TEST_CASE("an assignment's fields are checked against each other") {
  CHECK(server_accepted(round_with("master_port", 29500)));
  CHECK_FALSE(server_accepted(round_with("master_port", 0)));  // node 0 always supplies one
  CHECK_FALSE(server_accepted(round_with("master_port", 70000)));
  CHECK_FALSE(server_accepted(round_with("master_addr", "")));
  CHECK_FALSE(server_accepted(round_with("master_addr", "a b")));
  CHECK(server_accepted(round_with("restart_count", 2)));  // rounds, not restarts: an elastic job's joins add some
  CHECK_FALSE(server_accepted(round_with("restart_count", -1)));
  CHECK_FALSE(server_accepted(round_with("restart_count", 1LL << 31)));
  CHECK_FALSE(server_accepted(round_with("master_port", 29500, 1, 3)));  // rank offset is not 4
  CHECK_FALSE(server_accepted(round_with("nprocs_runs", json::array({json::array({0, 2})}))));
}

TEST_CASE("a challenge's nonce is hex and its heartbeat timeout longer than its interval") {
  auto challenge = [](const json& nonce, long long interval, long long timeout) {
    return json{{"type", "challenge"}, {"proto", "ddprun-rdzv"}, {"v", 1}, {"nonce", nonce},
                {"heartbeat_interval_ms", interval}, {"heartbeat_timeout_ms", timeout}}.dump();
  };
  CHECK(server_accepted(challenge("00ff", 1000, 5000)));
  CHECK_FALSE(server_accepted(challenge("zz", 1000, 5000)));
  CHECK_FALSE(server_accepted(challenge("00ff", 0, 5000)));
  CHECK_FALSE(server_accepted(challenge("00ff", 1000, 1000)));
  CHECK_FALSE(server_accepted(challenge("00ff", 1000, 1LL << 40)));
  // Issue 55: the settings an insider acting as server may impose are bounded: 10 ms to 10 min, at most an hour.
  CHECK(server_accepted(challenge("00ff", 10, 3'600'000)));
  CHECK_FALSE(server_accepted(challenge("00ff", 1, 5000)));
  CHECK_FALSE(server_accepted(challenge("00ff", 600'001, 3'600'000)));
  CHECK_FALSE(server_accepted(challenge("00ff", 1000, 86'400'000)));
}

TEST_CASE("exit_status_of never returns 0 or more than 255 for a failure, whatever it holds") {
  Failure f;
  f.rank = f.local_rank = 0;
  f.exit_code = 256;
  CHECK(exit_status_of(f) == 1);
  f.exit_code = 0;
  CHECK(exit_status_of(f) == 1);
  f.exit_code = -3;
  CHECK(exit_status_of(f) == 1);
  f.exit_code = 42;
  CHECK(exit_status_of(f) == 42);
  f.exit_code.reset();
  f.signal = 2147483647;
  CHECK(exit_status_of(f) == 1);
  f.signal = 0;
  CHECK(exit_status_of(f) == 1);
  f.signal = 64;
  CHECK(exit_status_of(f) == 192);
}
