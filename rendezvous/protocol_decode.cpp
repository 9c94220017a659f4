// Decoding of the wire messages: every payload comes from an unauthenticated or untrusted peer.
#include <limits>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/json_depth.hpp"
#include "rendezvous/json_fields.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

using nlohmann::json;
using namespace json_fields;

namespace {

// Rejected before parsing: nesting this deep is never ours, and would make destruction recurse deeply.
constexpr int kMaxNesting = 16;

json parse_object(std::string_view payload) {
  if (!json_nesting_within(payload, kMaxNesting)) throw ProtocolError("message nested too deeply");
  json j = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ProtocolError("message is not valid JSON");
  if (!j.is_object()) throw ProtocolError("message is not a JSON object");
  return j;
}

Failure get_failure(const json& obj, const char* key) {
  try {
    return required(obj, key).get<Failure>();
  } catch (const json::exception& e) {
    throw ProtocolError(std::string("bad failure: ") + e.what());
  } catch (const ProtocolError& e) {
    throw ProtocolError(std::string("bad failure: ") + e.what());
  }
}

Assignment decode_assignment(const json& j) {
  Assignment a;
  const json& round = required(j, "round");
  a.nnodes = get_int_in(round, "nnodes", 1, kMaxNodes);
  a.node_rank = get_int_in(j, "node_rank", 0, a.nnodes - 1);
  a.rank_offset = get_int_in(j, "rank_offset", 0, std::numeric_limits<int>::max());
  a.world_size = get_int_in(round, "world_size", 0, std::numeric_limits<int>::max());
  const json& runs = required(round, "nprocs_runs");
  if (!runs.is_array()) throw ProtocolError("field \"nprocs_runs\" is not an array");
  a.nprocs.reserve(static_cast<std::size_t>(a.nnodes));
  long long world = 0;
  for (const json& run : runs) {
    if (!run.is_array() || run.size() != 2 || !run[0].is_number_integer() || !run[1].is_number_integer())
      throw ProtocolError("field \"nprocs_runs\" holds a malformed run");
    auto nproc = run[0].get<long long>(), count = run[1].get<long long>();
    if (nproc < 1 || nproc > kMaxNproc || count < 1 || count > a.nnodes - static_cast<long long>(a.nprocs.size()))
      throw ProtocolError("field \"nprocs_runs\" does not add up to nnodes");
    a.nprocs.insert(a.nprocs.end(), static_cast<std::size_t>(count), static_cast<int>(nproc));
    world += nproc * count;
  }
  if (static_cast<int>(a.nprocs.size()) != a.nnodes || world != a.world_size)
    throw ProtocolError("assignment's nprocs do not add up to nnodes and world_size");
  long long below = 0;  // the rank offset is implied by the nprocs: check it rather than trust it
  for (int r = 0; r < a.node_rank; ++r) below += a.nprocs[static_cast<std::size_t>(r)];
  if (below != a.rank_offset) throw ProtocolError("assignment's rank_offset does not match the nprocs below it");
  a.master_addr = get_host(round, "master_addr", /*allow_empty=*/false);
  a.master_port = get_int_in(round, "master_port", 1, 65535);
  a.run_id = get_string(round, "run_id", kMaxRunIdBytes);
  a.max_restarts = get_int_in(round, "max_restarts", 0, kMaxRestarts);
  // Rounds after the first, whatever re-formed them: an elastic job's joins add rounds that use no restart,
  // so the count may exceed max_restarts (state_machine.hpp).
  a.restart_count = get_int_in(round, "restart_count", 0, kMaxRank);
  a.fence = round.contains("fence") ? get_int_in(round, "fence", std::int64_t{1}, kMaxFence) : 0;
  return a;
}

// A seat's commitment or secret (auth.hpp): absent, or exactly 64 hex digits.
std::string get_seat(const json& j, const char* key) {
  if (!j.contains(key)) return {};
  std::string hex = get_hex(j, key, 64);
  if (hex.size() != 64) throw ProtocolError(std::string("field \"") + key + "\" is not 64 hex digits");
  return hex;
}

// ---- resume after a server restart (issue 19) ----
// A node's claim on the round it runs: bounded like an assignment, and consistent in itself (its ranks inside
// the world); whether it agrees with the other nodes' is the state machine's (state_machine_resume.cpp).
ResumeClaim decode_resume(const json& j) {
  if (!j.is_object()) throw ProtocolError("field \"resume\" is not an object");
  ResumeClaim c;
  c.restart_count = get_int_in(j, "restart_count", 0, kMaxRank);
  c.nnodes = get_int_in(j, "nnodes", 1, kMaxNodes);
  c.node_rank = get_int_in(j, "node_rank", 0, c.nnodes - 1);
  c.world_size = get_int_in(j, "world_size", 1, kMaxRank + 1);
  c.rank_offset = get_int_in(j, "rank_offset", 0, c.world_size - 1);
  c.master_addr = get_host(j, "master_addr", /*allow_empty=*/false);
  c.master_port = get_int_in(j, "master_port", 1, 65535);
  c.fingerprint = get_hex(j, "nprocs", 16);
  if (c.fingerprint.size() != 16) throw ProtocolError("field \"nprocs\" is not a 16-digit fingerprint");
  c.seat_secret = get_seat(j, "seat_secret");
  return c;
}
// ---- end of resume ----

ErrorKind parse_error_kind(const std::string& text) {
  for (ErrorKind kind : {ErrorKind::kRefused, ErrorKind::kTimeout, ErrorKind::kLostServer, ErrorKind::kProtocol,
                         ErrorKind::kUnavailable})
    if (text == to_string(kind)) return kind;
  return ErrorKind::kRefused;  // a newer server's kind: still an error that ends the client
}

HangViewMsg decode_hang_view(const json& j) {
  HangViewMsg m;
  m.suspect = get_bool(j, "suspect", false);
  m.held = get_bool(j, "held", false);
  m.stacks = get_string(j, "stacks", kMaxMessageBytes);
  const json& ranks = required(j, "ranks");
  if (!ranks.is_array()) throw ProtocolError("field \"ranks\" is not an array");
  if (ranks.size() > static_cast<std::size_t>(kMaxNproc)) throw ProtocolError("more ranks than a node can run");
  constexpr std::int64_t kMaxMs = std::int64_t{1} << 50;
  for (const json& r : ranks) {
    if (!r.is_object()) throw ProtocolError("a rank of a hang view is not an object");
    RankBeat b;
    b.rank = get_int_in(r, "rank", 0, kMaxRank);
    b.local_rank = get_int_in(r, "local_rank", 0, kMaxNproc - 1);
    b.pid = get_int_in(r, "pid", std::int64_t{0}, kMaxPid);
    b.step = get_int_in(r, "step", std::int64_t{-1}, std::numeric_limits<std::int64_t>::max());
    b.silent_ms = get_int_in(r, "silent_ms", std::int64_t{0}, kMaxMs);
    b.never_beat = get_bool(r, "never_beat", false);
    b.hung = get_bool(r, "hung", false);
    b.quiet = get_bool(r, "quiet", false);
    b.python_stack = get_bool(r, "python_stack", false);
    b.collective = get_optional_string(r, "in", kMaxCollectiveBytes);
    if (r.contains("quiet_left_ms")) b.quiet_left_ms = get_int_in(r, "quiet_left_ms", std::int64_t{0}, kMaxMs);
    b.stopped = get_bool(r, "stopped", false);
    b.slow = get_bool(r, "slow", false);
    b.recovered = get_bool(r, "recovered", false);
    m.ranks.push_back(b);
  }
  return m;
}

// The server's answer to view_request: one status per node, each as bounded as a node_status.
JobViewMsg decode_job_view(const json& j) {
  JobViewMsg m;
  const json& nodes = required(j, "nodes");
  const json& ages = required(j, "ages_ms");
  if (!nodes.is_array() || !ages.is_array() || nodes.size() != ages.size())
    throw ProtocolError("fields \"nodes\" and \"ages_ms\" are not arrays of one length");
  if (nodes.size() > static_cast<std::size_t>(kMaxNodes)) throw ProtocolError("more nodes than a job can have");
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].is_string() || nodes[i].get_ref<const std::string&>().size() > kMaxNodeStatusBytes ||
        !ages[i].is_number_integer())
      throw ProtocolError("a node of a job view is not a bounded string with an age");
    m.nodes.push_back(nodes[i].get<std::string>());
    m.ages_ms.push_back(std::max<std::int64_t>(0, ages[i].get<std::int64_t>()));
  }
  return m;
}

NodeStatusMsg decode_node_status(const json& j) {
  NodeStatusMsg m{get_string(j, "status", kMaxNodeStatusBytes), {}};
  auto it = j.find("paces");
  if (it == j.end()) return m;
  if (!it->is_array() || it->size() > static_cast<std::size_t>(kMaxNproc))
    throw ProtocolError("field \"paces\" is not an array of at most one entry per worker");
  for (const json& p : *it) {
    if (!p.is_object()) throw ProtocolError("a pace is not an object");
    m.paces.push_back(RankPace{get_int_in(p, "rank", 0, kMaxRank), get_int_in(p, "step_us", std::int64_t{0}, kMaxPaceUs),
                               get_int_in(p, "work_us", std::int64_t{-1}, kMaxPaceUs)});
  }
  return m;
}

StragglersMsg decode_stragglers(const json& j) {
  const json& named = required(j, "named");
  if (!named.is_array() || named.size() > kMaxStragglers)
    throw ProtocolError("field \"named\" is not an array of at most " + std::to_string(kMaxStragglers));
  StragglersMsg m;
  for (const json& s : named) {
    if (!s.is_object()) throw ProtocolError("a straggler is not an object");
    m.named.push_back(Straggler{get_int_in(s, "rank", 0, kMaxRank), get_int_in(s, "node_rank", 0, kMaxNodes - 1),
                                get_host(s, "host", /*allow_empty=*/true),
                                get_int_in(s, "pace_us", std::int64_t{0}, kMaxPaceUs),
                                get_int_in(s, "median_us", std::int64_t{0}, kMaxPaceUs), get_bool(s, "work", false)});
  }
  return m;
}

std::vector<int> rank_array(const json& ranks, const char* field) {
  if (!ranks.is_array() || ranks.size() > kMaxStragglers)
    throw ProtocolError(std::string("field \"") + field + "\" is not an array of at most " +
                        std::to_string(kMaxStragglers));
  std::vector<int> out;
  for (const json& r : ranks) {
    if (!r.is_number_integer() || r.get<std::int64_t>() < 0 || r.get<std::int64_t>() > kMaxRank)
      throw ProtocolError(std::string("field \"") + field + "\" holds what is not a rank");
    out.push_back(r.get<int>());
  }
  return out;
}

HangDeferredMsg decode_hang_deferred(const json& j) {
  HangDeferredMsg m;
  m.quiet_ranks = rank_array(required(j, "quiet_ranks"), "quiet_ranks");
  if (j.contains("recovered")) m.recovered = rank_array(j["recovered"], "recovered");
  // A deferral for quiet ranks waits; an inquiry cleared by recovered ranks does not.
  if (m.quiet_ranks.empty() == m.recovered.empty())
    throw ProtocolError("a hang deferral names quiet ranks or recovered ones, one of the two");
  m.wait_ms = get_int_in(j, "wait_ms", std::int64_t{m.quiet_ranks.empty() ? 0 : 1}, kMaxQuietWaitMs);
  return m;
}

}  // namespace

ClientMessage decode_client_message(std::string_view payload) {
  json j = parse_object(payload);
  std::string type = get_string(j, "type", kMaxTypeBytes);
  if (type == "heartbeat") return HeartbeatMsg{};
  if (type == "hello") {
    HelloMsg m;
    m.version = get_int_in(j, "v", 0, std::numeric_limits<int>::max());
    m.run_id = get_string(j, "run_id", kMaxRunIdBytes);
    m.mac = get_hex(j, "mac", kMaxHexBytes);
    m.node_rank = get_optional_int_in(j, "node_rank", 0, kMaxNodes - 1);
    m.nproc = get_int_in(j, "nproc", 0, kMaxNproc);
    m.host = get_host(j, "host", /*allow_empty=*/true);
    m.address = get_optional_host(j, "address");
    m.master_port = get_int_in(j, "master_port", 0, 65535);  // 0: this node has none (it cannot be node 0)
    m.munge_credential = get_optional_string(j, "munge", kMaxMungeCredentialBytes);
    m.hosts_server = get_bool(j, "hosts_server", false);
    m.seat = get_seat(j, "seat");
    m.cannot_join = get_optional_string(j, "cannot_join", kMaxMessageBytes);
    if (j.contains("resume")) m.resume = decode_resume(required(j, "resume"));
    m.after_round = get_optional_int_in(j, "after_round", 0, kMaxRank);
    return m;
  }
  if (type == "failure") return FailureMsg{get_failure(j, "failure")};
  if (type == "node_done") return NodeDoneMsg{get_bool(j, "noticed", false)};
  if (type == "stopped") return StoppedMsg{get_optional_int_in(j, "master_port", 1, 65535).value_or(0)};
  if (type == "hang_view") return decode_hang_view(j);
  if (type == "node_status") return decode_node_status(j);
  if (type == "view_request") return ViewRequestMsg{};
  if (type == "prove") return ProveMsg{get_hex(j, "nonce", kMaxHexBytes)};
  if (type == "round_ready") return RoundReadyMsg{get_int_in(j, "round", 0, kMaxRank)};
  throw ProtocolError("unknown message type");  // not echoed: the peer's text does not go into our log
}

ServerMessage decode_server_message(std::string_view payload) {
  json j = parse_object(payload);
  std::string type = get_string(j, "type", kMaxTypeBytes);
  if (type == "heartbeat") return HeartbeatAckMsg{};
  if (type == "assignment") return decode_assignment(j);
  if (type == "proof") return ProofMsg{get_hex(j, "proof", kMaxHexBytes)};
  if (type == "challenge") {
    ChallengeMsg m;
    m.protocol = get_string(j, "proto", kMaxTypeBytes);
    m.version = get_int_in(j, "v", 0, std::numeric_limits<int>::max());
    m.nonce = get_hex(j, "nonce", kMaxHexBytes);
    m.heartbeat_interval_ms = get_int_in(j, "heartbeat_interval_ms", kMinHeartbeatIntervalMs, kMaxHeartbeatIntervalMs);
    m.heartbeat_timeout_ms = get_int_in(j, "heartbeat_timeout_ms", m.heartbeat_interval_ms + 1, kMaxHeartbeatMs);
    m.munge = get_bool(j, "munge", false);
    m.proof = get_optional_string(j, "proof", kMaxHexBytes);
    m.resumable = get_bool(j, "resumable", false);
    m.meets = get_bool(j, "meets", false);
    return m;
  }
  if (type == "error")
    return ErrorMsg{parse_error_kind(get_string(j, "kind", kMaxTypeBytes)), get_string(j, "message", kMaxMessageBytes)};
  if (type == "stop")
    return StopMsg{get_failure(j, "root_cause"), get_string(j, "reason", kMaxMessageBytes),
                   get_bool(j, "restarting", false), get_bool(j, "membership", false), get_bool(j, "rejoin", false)};
  if (type == "complete") return CompleteMsg{get_bool(j, "noticed", false)};
  if (type == "capture") return CaptureMsg{};
  if (type == "hang_deferred") return decode_hang_deferred(j);
  if (type == "job_view") return decode_job_view(j);
  if (type == "stragglers") return decode_stragglers(j);
  if (type == "meet") return MeetMsg{get_int_in(j, "round", 0, kMaxRank)};
  throw ProtocolError("unknown message type");
}

}  // namespace ddprun::rendezvous
