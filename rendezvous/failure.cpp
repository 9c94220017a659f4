#include "rendezvous/failure.hpp"

#include <csignal>
#include <cstring>
#include <sstream>

#include <nlohmann/json.hpp>

#include "rendezvous/json_fields.hpp"

namespace ddprun::rendezvous {

bool operator==(const Failure& a, const Failure& b) {
  return a.node_rank == b.node_rank && a.host == b.host && a.rank == b.rank && a.local_rank == b.local_rank &&
         a.pid == b.pid && a.exit_code == b.exit_code && a.signal == b.signal &&
         a.time_unix_ms == b.time_unix_ms && a.error_file_contents == b.error_file_contents &&
         a.message == b.message;
}

namespace {
std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}
}  // namespace

std::string describe(const Failure& failure) {
  std::ostringstream out;
  if (failure.is_node_failure()) {
    out << "node " << failure.node_rank << " (host " << (failure.host.empty() ? "?" : failure.host) << ") lost";
    if (!failure.message.empty()) out << ": " << failure.message;
    return out.str();
  }
  out << "rank " << failure.rank << " (local rank " << failure.local_rank << ", node " << failure.node_rank
      << ", host " << (failure.host.empty() ? "?" : failure.host) << ", pid " << failure.pid << ")";
  if (failure.signal) out << " was killed by signal " << *failure.signal << " (" << signal_name(*failure.signal) << ")";
  else if (failure.exit_code) out << " exited with code " << *failure.exit_code;
  else out << " failed";
  if (!failure.message.empty()) out << ": " << failure.message;
  return out.str();
}

int exit_status_of(const Failure& failure) {
  if (failure.signal) return 128 + *failure.signal;
  if (failure.exit_code && *failure.exit_code != 0) return *failure.exit_code;
  return 1;
}

void to_json(nlohmann::json& out, const Failure& failure) {
  out = nlohmann::json{{"node_rank", failure.node_rank}, {"host", failure.host},
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
}

void from_json(const nlohmann::json& in, Failure& failure) {
  using namespace json_fields;
  Failure f;
  f.node_rank = get_int32(in, "node_rank");
  f.host = get_string(in, "host");
  f.rank = get_int32(in, "rank");
  f.local_rank = get_int32(in, "local_rank");
  f.pid = get_int(in, "pid");
  f.time_unix_ms = get_int(in, "time_unix_ms");
  f.exit_code = get_optional_int32(in, "exit_code");
  f.signal = get_optional_int32(in, "signal");
  f.error_file_contents = get_optional_string(in, "error_file_contents");
  f.message = get_optional_string(in, "message");
  failure = std::move(f);
}

}  // namespace ddprun::rendezvous
