// Decoding of the wire messages: every payload comes from an unauthenticated or untrusted peer.
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "rendezvous/json_fields.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

using nlohmann::json;
using namespace json_fields;

namespace {

// Rejected before parsing: nesting this deep is never ours, and would make destruction recurse deeply.
constexpr int kMaxNesting = 16;

json parse_object(std::string_view payload) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : payload) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxNesting) throw ProtocolError("message nested too deeply");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  json j = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ProtocolError("message is not valid JSON");
  if (!j.is_object()) throw ProtocolError("message is not a JSON object");
  return j;
}

int get_count(const json& obj, const char* key, int min, int max) {
  int value = get_int32(obj, key);
  if (value < min || value > max)
    throw ProtocolError(std::string("field \"") + key + "\" = " + std::to_string(value) + " is out of range");
  return value;
}

Failure get_failure(const json& obj, const char* key) {
  try {
    return required(obj, key).get<Failure>();
  } catch (const json::exception& e) {
    throw ProtocolError(std::string("bad failure: ") + e.what());
  }
}

Assignment decode_assignment(const json& j) {
  Assignment a;
  const json& round = required(j, "round");
  a.nnodes = get_count(round, "nnodes", 1, kMaxNodes);
  a.node_rank = get_count(j, "node_rank", 0, a.nnodes - 1);
  a.rank_offset = get_count(j, "rank_offset", 0, std::numeric_limits<int>::max());
  a.world_size = get_count(round, "world_size", 0, std::numeric_limits<int>::max());
  const json& runs = required(round, "nprocs_runs");
  if (!runs.is_array()) throw ProtocolError("field \"nprocs_runs\" is not an array");
  a.nprocs.reserve(static_cast<std::size_t>(a.nnodes));
  long long world = 0;
  for (const json& run : runs) {
    if (!run.is_array() || run.size() != 2 || !run[0].is_number_integer() || !run[1].is_number_integer())
      throw ProtocolError("field \"nprocs_runs\" holds a malformed run");
    auto nproc = run[0].get<long long>(), count = run[1].get<long long>();
    if (nproc < 0 || count < 1 || count > a.nnodes - static_cast<long long>(a.nprocs.size()))
      throw ProtocolError("field \"nprocs_runs\" does not add up to nnodes");
    a.nprocs.insert(a.nprocs.end(), static_cast<std::size_t>(count), static_cast<int>(nproc));
    world += nproc * count;
  }
  if (static_cast<int>(a.nprocs.size()) != a.nnodes || world != a.world_size)
    throw ProtocolError("assignment's nprocs do not add up to nnodes and world_size");
  a.master_addr = get_string(round, "master_addr");
  a.master_port = get_count(round, "master_port", 0, 65535);
  a.run_id = get_string(round, "run_id");
  a.restart_count = get_count(round, "restart_count", 0, std::numeric_limits<int>::max());
  a.max_restarts = get_count(round, "max_restarts", 0, std::numeric_limits<int>::max());
  return a;
}

ErrorKind parse_error_kind(const std::string& text) {
  for (ErrorKind kind : {ErrorKind::kRefused, ErrorKind::kTimeout, ErrorKind::kLostServer, ErrorKind::kProtocol})
    if (text == to_string(kind)) return kind;
  return ErrorKind::kRefused;  // a newer server's kind: still an error that ends the client
}

}  // namespace

ClientMessage decode_client_message(std::string_view payload) {
  json j = parse_object(payload);
  std::string type = get_string(j, "type");
  if (type == "heartbeat") return HeartbeatMsg{};
  if (type == "hello") {
    HelloMsg m;
    m.version = get_int32(j, "v");
    m.run_id = get_string(j, "run_id");
    m.mac = get_string(j, "mac");
    m.node_rank = get_optional_int32(j, "node_rank");
    m.nproc = get_count(j, "nproc", 0, 1 << 16);
    m.host = get_string(j, "host");
    m.address = get_optional_string(j, "address");
    m.master_port = get_count(j, "master_port", 0, 65535);
    return m;
  }
  if (type == "failure") return FailureMsg{get_failure(j, "failure")};
  if (type == "node_done") return NodeDoneMsg{};
  if (type == "stopped") return StoppedMsg{};
  throw ProtocolError("unknown message type \"" + type + "\"");
}

ServerMessage decode_server_message(std::string_view payload) {
  json j = parse_object(payload);
  std::string type = get_string(j, "type");
  if (type == "heartbeat") return HeartbeatAckMsg{};
  if (type == "assignment") return decode_assignment(j);
  if (type == "challenge") {
    ChallengeMsg m;
    m.protocol = get_string(j, "proto");
    m.version = get_int32(j, "v");
    m.nonce = get_string(j, "nonce");
    m.heartbeat_interval_ms = get_int(j, "heartbeat_interval_ms");
    m.heartbeat_timeout_ms = get_int(j, "heartbeat_timeout_ms");
    return m;
  }
  if (type == "error") return ErrorMsg{parse_error_kind(get_string(j, "kind")), get_string(j, "message")};
  if (type == "stop") return StopMsg{get_failure(j, "root_cause"), get_string(j, "reason"), get_bool(j, "restarting", false)};
  if (type == "complete") return CompleteMsg{};
  throw ProtocolError("unknown message type \"" + type + "\"");
}

}  // namespace ddprun::rendezvous
