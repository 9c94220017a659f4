#include "rendezvous/failure.hpp"

#include <algorithm>
#include <csignal>
#include <iterator>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "rendezvous/json_fields.hpp"

namespace ddprun::rendezvous {

const char* to_string(FailureKind kind) {
  switch (kind) {
    case FailureKind::kExited: return "exited";
    case FailureKind::kSignaled: return "signaled";
    case FailureKind::kHung: return "hung";
    case FailureKind::kNodeLost: return "node_lost";
    case FailureKind::kAgentStopped: return "agent_stopped";
    case FailureKind::kCannotStart: return "cannot_start";
    case FailureKind::kJoined: return "joined";
  }
  return "?";
}

bool operator==(const Failure& a, const Failure& b) {
  return a.kind == b.kind && a.node_rank == b.node_rank && a.host == b.host && a.rank == b.rank && a.local_rank == b.local_rank &&
         a.pid == b.pid && a.exit_code == b.exit_code && a.signal == b.signal &&
         a.time_unix_ms == b.time_unix_ms && a.error_file_contents == b.error_file_contents &&
         a.message == b.message && a.unsure == b.unsure;
}

namespace {
// What a failure of its kind must hold and must not; nullptr when it fits.
const char* kind_mismatch(const Failure& f) {
  const bool worker = f.rank >= 0;
  switch (f.kind) {
    case FailureKind::kExited: return worker && f.exit_code ? nullptr : "needs a rank and an exit code";
    case FailureKind::kSignaled: return worker && f.signal ? nullptr : "needs a rank and a signal";
    case FailureKind::kHung: return (worker && f.signal) || (!worker && !f.signal) ? nullptr : "needs a rank and a signal, or neither";
    case FailureKind::kAgentStopped: return !worker && f.signal ? nullptr : "needs a signal and no rank";
    case FailureKind::kCannotStart: return !worker && f.exit_code ? nullptr : "needs an exit code and no rank";
    case FailureKind::kNodeLost:
    case FailureKind::kJoined: return !worker && !f.signal && !f.exit_code ? nullptr : "has no rank, signal or exit code";
  }
  return "is unknown";
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}
}  // namespace

std::string describe(const Failure& failure) {
  std::ostringstream out;
  if (is_agent_stopped(failure) && failure.signal) {
    // The node's ddprun itself was stopped (Ctrl-C, scancel, kill): not a lost node, and it says which.
    out << "ddprun on node " << failure.node_rank << " (host " << (failure.host.empty() ? "?" : failure.host)
        << ") received " << signal_name(*failure.signal);
    return out.str();
  }
  if (is_join(failure)) {  // not a loss: a membership change
    out << "host " << (failure.host.empty() ? "?" : failure.host) << " joined the job";
    return out.str();
  }
  if (is_start_failure(failure)) {
    out << "node " << failure.node_rank << " (host " << (failure.host.empty() ? "?" : failure.host)
        << ") could not start";
    if (!failure.message.empty()) out << ": " << failure.message;
    return out.str();
  }
  // A hang verdict that names nobody: its message says why ("hung: ...").
  if (is_hang(failure) && failure.is_node_failure()) {
    out << "the job " << failure.message;
    return out.str();
  }
  if (failure.is_node_failure()) {
    out << "node " << failure.node_rank << " (host " << (failure.host.empty() ? "?" : failure.host) << ") lost";
    if (!failure.message.empty()) out << ": " << failure.message;
    return out.str();
  }
  // The hang verdict could not tell which rank holds the others (hang_verdict.hpp): no rank in front, the
  // message lists them all.
  if (failure.unsure && is_hang(failure)) {
    out << "the job " << failure.message;
    return out.str();
  }
  out << "rank " << failure.rank << " (local rank " << failure.local_rank << ", node " << failure.node_rank
      << ", host " << (failure.host.empty() ? "?" : failure.host);
  // A worker whose exec failed never had a process of its own: no pid to show, and it did not "exit".
  if (failure.pid == 0 && failure.exit_code) {
    out << ") could not be started (exit code " << *failure.exit_code << ")";
    if (!failure.message.empty()) out << ": " << failure.message;
    return out.str();
  }
  out << ", pid " << failure.pid << ")";
  // A hung worker (ddprun --hang-timeout) was killed by its agent: the reason, not the signal, comes first.
  if (is_hang(failure)) {
    out << " " << failure.message;
    return out.str();
  }
  if (failure.signal) out << " was killed by signal " << *failure.signal << " (" << signal_name(*failure.signal) << ")";
  else if (failure.exit_code) out << " exited with code " << *failure.exit_code;
  else out << " failed";
  if (!failure.message.empty()) out << ": " << failure.message;
  return out.str();
}

int exit_status_of(const Failure& failure) {
  if (is_hang(failure)) return kExitHung;  // not 137: a batch script must tell a hang from an OOM kill
  // Belt and braces behind the decoder's checks: an exit status is 8 bits, so 256 would leave as 0 and a
  // huge signal would overflow. Whatever a Failure holds, a failed job never exits 0.
  if (failure.signal && *failure.signal >= 1 && *failure.signal <= kMaxSignal) return 128 + *failure.signal;
  if (failure.exit_code && *failure.exit_code >= 1 && *failure.exit_code <= 255) return *failure.exit_code;
  return 1;
}

void to_json(nlohmann::json& out, const Failure& failure) {
  out = nlohmann::json{{"kind", to_string(failure.kind)}, {"node_rank", failure.node_rank}, {"host", failure.host},
                       {"rank", failure.rank},           {"local_rank", failure.local_rank},
                       {"pid", failure.pid},             {"time_unix_ms", failure.time_unix_ms}};
  if (failure.exit_code) out["exit_code"] = *failure.exit_code;
  if (failure.signal) out["signal"] = *failure.signal;
  if (failure.error_file_contents.size() > kMaxErrorFileBytes) {
    // Cut on a byte boundary: a split UTF-8 sequence is replaced when the frame is encoded (protocol.cpp).
    out["error_file_contents"] = failure.error_file_contents.substr(0, kMaxErrorFileBytes) + "\n[truncated]";
  } else if (!failure.error_file_contents.empty()) {
    out["error_file_contents"] = failure.error_file_contents;
  }
  if (!failure.message.empty()) out["message"] = failure.message;
  if (failure.unsure) out["unsure"] = true;
}

void from_json(const nlohmann::json& in, Failure& failure) {
  // Every field is a peer's claim: bounded here, so what reaches describe(), exit_status_of() and the
  // agent's exit summary is always something a real worker or node could have produced.
  using namespace json_fields;
  Failure f;
  f.node_rank = get_int_in(in, "node_rank", -1, kMaxNodeRank);
  f.host = get_host(in, "host", /*allow_empty=*/true);
  f.rank = get_int_in(in, "rank", -1, kMaxRank);
  f.local_rank = get_int_in(in, "local_rank", -1, kMaxRank);
  if ((f.rank < 0) != (f.local_rank < 0))
    throw ProtocolError("a failure's rank and local rank must both be set (a worker) or both be -1 (a node)");
  f.pid = get_int_in(in, "pid", std::int64_t{0}, kMaxPid);
  f.time_unix_ms = get_int_in(in, "time_unix_ms", std::int64_t{0}, kMaxUnixMs);
  f.exit_code = get_optional_int_in(in, "exit_code", 0, 255);
  f.signal = get_optional_int_in(in, "signal", 1, kMaxSignal);
  if (f.exit_code && f.signal) throw ProtocolError("a failure cannot both exit with a code and be killed by a signal");
  const std::string kind = get_string(in, "kind", 32);
  static constexpr FailureKind kKinds[] = {FailureKind::kExited,       FailureKind::kSignaled,
                                           FailureKind::kHung,         FailureKind::kNodeLost,
                                           FailureKind::kAgentStopped, FailureKind::kCannotStart,
                                           FailureKind::kJoined};
  const auto* found = std::find_if(std::begin(kKinds), std::end(kKinds), [&](FailureKind k) { return kind == to_string(k); });
  if (found == std::end(kKinds)) throw ProtocolError("a failure of an unknown kind \"" + kind + "\"");
  f.kind = *found;
  if (const char* why = kind_mismatch(f)) throw ProtocolError(std::string("a failure of kind ") + to_string(f.kind) + " " + why);
  if (f.rank >= 0 && !f.exit_code && !f.signal)
    throw ProtocolError("a worker's failure needs an exit code or a signal");
  // A node that could not start (is_start_failure) ends the job with ddprun's 69; no other node failure has a code.
  if (f.rank < 0 && f.exit_code && *f.exit_code != kExitUnavailable)
    throw ProtocolError("a node's failure has no exit code but 69, could not start (else only a signal)");
  // to_json cuts at kMaxErrorFileBytes, but encoding replaces each invalid UTF-8 byte by U+FFFD (3 bytes).
  f.error_file_contents = get_optional_string(in, "error_file_contents", 3 * kMaxErrorFileBytes + 64);
  f.message = get_optional_string(in, "message", kMaxMessageBytes);
  f.unsure = get_bool(in, "unsure", false);
  failure = std::move(f);
}

}  // namespace ddprun::rendezvous
