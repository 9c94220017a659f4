// Encoding of the wire messages. Decoding is in protocol_decode.cpp.
#include "rendezvous/protocol.hpp"

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/fnv1a.hpp"

namespace ddprun::rendezvous {

using nlohmann::json;

bool operator==(const Assignment& a, const Assignment& b) {
  return a.node_rank == b.node_rank && a.nnodes == b.nnodes && a.rank_offset == b.rank_offset &&
         a.world_size == b.world_size && a.nprocs == b.nprocs && a.master_addr == b.master_addr &&
         a.master_port == b.master_port && a.run_id == b.run_id && a.restart_count == b.restart_count &&
         a.max_restarts == b.max_restarts;
}

// ---- resume after a server restart (issue 19) ----
bool operator==(const ResumeClaim& a, const ResumeClaim& b) {
  return a.restart_count == b.restart_count && a.node_rank == b.node_rank && a.nnodes == b.nnodes &&
         a.rank_offset == b.rank_offset && a.world_size == b.world_size && a.master_addr == b.master_addr &&
         a.master_port == b.master_port && a.fingerprint == b.fingerprint && a.seat_secret == b.seat_secret;
}

std::string nprocs_fingerprint(const std::vector<int>& nprocs) {
  std::string bytes;  // each count's 4 bytes, little end first: alike on every node
  for (int n : nprocs)
    for (int shift = 0; shift < 32; shift += 8)
      bytes += static_cast<char>(static_cast<std::uint8_t>(static_cast<std::uint32_t>(n) >> shift));
  return fnv1a_hex(bytes);
}

bool same_round(const ResumeClaim& a, const ResumeClaim& b) {
  return a.restart_count == b.restart_count && a.nnodes == b.nnodes && a.world_size == b.world_size &&
         a.master_addr == b.master_addr && a.master_port == b.master_port && a.fingerprint == b.fingerprint;
}

ResumeClaim resume_claim_of(const Assignment& a) {
  return ResumeClaim{a.restart_count, a.node_rank,  a.nnodes,      a.rank_offset,
                     a.world_size,    a.master_addr, a.master_port, nprocs_fingerprint(a.nprocs),
                     /*seat_secret=*/{}};  // the client's own, added to its hello
}
// ---- end of resume ----

bool operator==(const RankBeat& a, const RankBeat& b) {
  return a.rank == b.rank && a.local_rank == b.local_rank && a.pid == b.pid && a.step == b.step &&
         a.silent_ms == b.silent_ms && a.never_beat == b.never_beat && a.hung == b.hung && a.quiet == b.quiet &&
         a.python_stack == b.python_stack && a.collective == b.collective && a.quiet_left_ms == b.quiet_left_ms &&
         a.stopped == b.stopped && a.slow == b.slow && a.recovered == b.recovered;
}

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kRefused: return "refused";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kLostServer: return "lost_server";
    case ErrorKind::kProtocol: return "protocol";
    case ErrorKind::kUnavailable: return "unavailable";
  }
  return "refused";
}

namespace {

// Strings from peers and error files need not be valid UTF-8; replace bad bytes rather than throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json typed(const char* type) { return json{{"type", type}}; }

// ---- resume after a server restart (issue 19) ----
json resume_json(const ResumeClaim& c) {
  json j{{"restart_count", c.restart_count}, {"node_rank", c.node_rank},   {"nnodes", c.nnodes},
         {"rank_offset", c.rank_offset},     {"world_size", c.world_size}, {"master_addr", c.master_addr},
         {"master_port", c.master_port},     {"nprocs", c.fingerprint}};
  if (!c.seat_secret.empty()) j["seat_secret"] = c.seat_secret;
  return j;
}
// ---- end of resume ----

json to_json_value(const ClientMessage& message) {
  return std::visit(
      [](const auto& m) -> json {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, HelloMsg>) {
          json j = typed("hello");
          j["v"] = m.version;
          j["run_id"] = m.run_id;
          j["mac"] = m.mac;
          if (m.node_rank) j["node_rank"] = *m.node_rank;
          j["nproc"] = m.nproc;
          j["host"] = m.host;
          if (!m.address.empty()) j["address"] = m.address;
          j["master_port"] = m.master_port;
          if (!m.munge_credential.empty()) j["munge"] = m.munge_credential;
          if (m.hosts_server) j["hosts_server"] = true;
          if (!m.seat.empty()) j["seat"] = m.seat;
          if (!m.cannot_join.empty()) j["cannot_join"] = m.cannot_join;
          if (m.resume) j["resume"] = resume_json(*m.resume);
          if (m.after_round) j["after_round"] = *m.after_round;
          return j;
        } else if constexpr (std::is_same_v<T, HeartbeatMsg>) {
          return typed("heartbeat");
        } else if constexpr (std::is_same_v<T, FailureMsg>) {
          json j = typed("failure");
          j["failure"] = m.failure;
          return j;
        } else if constexpr (std::is_same_v<T, NodeDoneMsg>) {
          json j = typed("node_done");
          if (m.noticed) j["noticed"] = true;
          return j;
        } else if constexpr (std::is_same_v<T, HangViewMsg>) {
          json j = typed("hang_view");
          if (m.suspect) j["suspect"] = true;
          if (m.held) j["held"] = true;
          json ranks = json::array();
          for (const RankBeat& r : m.ranks)
            ranks.push_back(json{{"rank", r.rank}, {"local_rank", r.local_rank}, {"pid", r.pid}, {"step", r.step},
                                 {"silent_ms", r.silent_ms}, {"never_beat", r.never_beat}, {"hung", r.hung},
                                 {"quiet", r.quiet}, {"python_stack", r.python_stack}, {"in", r.collective}});
          // Optional on the wire, so that an older peer's view still decodes (absent: not quiet, not stopped).
          for (std::size_t i = 0; i < m.ranks.size(); ++i) {
            if (m.ranks[i].quiet_left_ms > 0) ranks[i]["quiet_left_ms"] = m.ranks[i].quiet_left_ms;
            if (m.ranks[i].stopped) ranks[i]["stopped"] = true;
            if (m.ranks[i].slow) ranks[i]["slow"] = true;
            if (m.ranks[i].recovered) ranks[i]["recovered"] = true;
          }
          j["ranks"] = std::move(ranks);
          j["stacks"] = m.stacks;
          return j;
        } else if constexpr (std::is_same_v<T, NodeStatusMsg>) {
          json j = typed("node_status");
          j["status"] = m.status;
          if (!m.paces.empty()) {
            json paces = json::array();
            for (const RankPace& p : m.paces)
              paces.push_back(json{{"rank", p.rank}, {"step_us", p.step_us}, {"work_us", p.work_us}});
            j["paces"] = std::move(paces);
          }
          return j;
        } else if constexpr (std::is_same_v<T, ViewRequestMsg>) {
          return typed("view_request");
        } else if constexpr (std::is_same_v<T, ProveMsg>) {
          json j = typed("prove");
          j["nonce"] = m.nonce;
          return j;
        } else if constexpr (std::is_same_v<T, RoundReadyMsg>) {
          json j = typed("round_ready");
          j["round"] = m.round;
          return j;
        } else {
          static_assert(std::is_same_v<T, StoppedMsg>);
          json j = typed("stopped");
          if (m.master_port > 0) j["master_port"] = m.master_port;
          return j;
        }
      },
      message);
}

json round_to_json(const Round& round) {
  json runs = json::array();
  for (const auto& [nproc, count] : round.nprocs_runs) runs.push_back(json::array({nproc, count}));
  json j{{"nnodes", round.nnodes},           {"world_size", round.world_size},
         {"nprocs_runs", std::move(runs)},   {"master_addr", round.master_addr},
         {"master_port", round.master_port}, {"run_id", round.run_id},
         {"restart_count", round.restart_count}, {"max_restarts", round.max_restarts}};
  if (round.fence != 0) j["fence"] = round.fence;
  return j;
}

}  // namespace

std::string encode(const ClientMessage& message) { return dump(to_json_value(message)); }

std::string encode(const ServerMessage& message) {
  return std::visit(
      [](const auto& m) -> std::string {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, ChallengeMsg>) {
          json j = typed("challenge");
          j["proto"] = m.protocol;
          j["v"] = m.version;
          j["nonce"] = m.nonce;
          j["heartbeat_interval_ms"] = m.heartbeat_interval_ms;
          j["heartbeat_timeout_ms"] = m.heartbeat_timeout_ms;
          if (m.munge) j["munge"] = true;
          if (m.resumable) j["resumable"] = true;
          if (m.meets) j["meets"] = true;
          if (!m.proof.empty()) j["proof"] = m.proof;
          return dump(j);
        } else if constexpr (std::is_same_v<T, ErrorMsg>) {
          json j = typed("error");
          j["kind"] = to_string(m.kind);
          j["message"] = m.message;
          return dump(j);
        } else if constexpr (std::is_same_v<T, Assignment>) {
          Round round = make_round(m.nprocs, m.master_addr, m.master_port, m.run_id, m.restart_count,
                                   m.max_restarts);
          round.fence = m.fence;
          return encode_assignment(encode_round(round), m.node_rank, m.rank_offset);
        } else if constexpr (std::is_same_v<T, HeartbeatAckMsg>) {
          return dump(typed("heartbeat"));
        } else if constexpr (std::is_same_v<T, StopMsg>) {
          json j = typed("stop");
          j["root_cause"] = m.root_cause;
          j["reason"] = m.reason;
          j["restarting"] = m.restarting;
          if (m.membership) j["membership"] = true;
          if (m.rejoin) j["rejoin"] = true;
          return dump(j);
        } else if constexpr (std::is_same_v<T, CompleteMsg>) {
          json j = typed("complete");
          if (m.noticed) j["noticed"] = true;
          return dump(j);
        } else if constexpr (std::is_same_v<T, JobViewMsg>) {
          json j = typed("job_view");
          j["nodes"] = m.nodes;
          j["ages_ms"] = m.ages_ms;
          return dump(j);
        } else if constexpr (std::is_same_v<T, StragglersMsg>) {
          json j = typed("stragglers");
          json named = json::array();
          for (const Straggler& s : m.named)
            named.push_back(json{{"rank", s.rank}, {"node_rank", s.node_rank}, {"host", s.host},
                                 {"pace_us", s.pace_us}, {"median_us", s.median_us}, {"work", s.work}});
          j["named"] = std::move(named);
          return dump(j);
        } else if constexpr (std::is_same_v<T, HangDeferredMsg>) {
          json j = typed("hang_deferred");
          j["quiet_ranks"] = m.quiet_ranks;
          j["wait_ms"] = m.wait_ms;
          if (!m.recovered.empty()) j["recovered"] = m.recovered;
          return dump(j);
        } else if constexpr (std::is_same_v<T, ProofMsg>) {
          json j = typed("proof");
          j["proof"] = m.proof;
          return dump(j);
        } else if constexpr (std::is_same_v<T, MeetMsg>) {
          json j = typed("meet");
          j["round"] = m.round;
          return dump(j);
        } else {
          static_assert(std::is_same_v<T, CaptureMsg>);
          return dump(typed("capture"));
        }
      },
      message);
}

std::string encode_round(const Round& round) { return dump(round_to_json(round)); }

std::string encode_assignment(std::string_view round_fragment, int node_rank, int rank_offset) {
  // Spliced as text: the round is shared by 10k nodes, only these two numbers differ between them.
  std::string out;
  out.reserve(round_fragment.size() + 64);
  out += R"({"type":"assignment","node_rank":)";
  out += std::to_string(node_rank);
  out += R"(,"rank_offset":)";
  out += std::to_string(rank_offset);
  out += R"(,"round":)";
  out += round_fragment;
  out += '}';
  return out;
}

Round make_round(const std::vector<int>& nprocs, std::string master_addr, int master_port, std::string run_id,
                 int restart_count, int max_restarts) {
  Round round;
  round.nnodes = static_cast<int>(nprocs.size());
  for (int n : nprocs) {
    round.world_size += n;
    if (!round.nprocs_runs.empty() && round.nprocs_runs.back().first == n) ++round.nprocs_runs.back().second;
    else round.nprocs_runs.emplace_back(n, 1);
  }
  round.master_addr = std::move(master_addr);
  round.master_port = master_port;
  round.run_id = std::move(run_id);
  round.restart_count = restart_count;
  round.max_restarts = max_restarts;
  return round;
}

}  // namespace ddprun::rendezvous

namespace ddprun::rendezvous {

std::string challenge_settings(const ChallengeMsg& challenge) {
  return challenge.protocol + " v" + std::to_string(challenge.version) +
         " heartbeat=" + std::to_string(challenge.heartbeat_interval_ms) + "/" +
         std::to_string(challenge.heartbeat_timeout_ms) + " munge=" + (challenge.munge ? "1" : "0") +
         " resumable=" + (challenge.resumable ? "1" : "0") + " meets=" + (challenge.meets ? "1" : "0");
}

}  // namespace ddprun::rendezvous
