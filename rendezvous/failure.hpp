// A failure, as data: the unit of the job's failure semantics.
//
// A worker that exits non-zero or is killed by a signal is a Failure (rank >= 0); a node that vanishes (its
// agent's connection closed or its heartbeats stopped) is a Failure with rank == -1 and a message saying
// why. The root cause of a job is the first Failure the rendezvous server received; every agent is told
// the same one. The agent reuses this struct for its own exit summary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace ddprun::rendezvous {

// What failed, as a type (issue 31: it was prose, a "hung:" prefix of the message, and exit code 78 and the hang
// verdict's kill depended on it). Exit codes and decisions read the kind; the message is free to change. The
// fields each kind needs are checked when a peer's failure is decoded (from_json).
enum class FailureKind {
  kExited,        // a worker exited non-zero, or could not be started (pid 0): exit_code
  kSignaled,      // a worker was killed by a signal: signal
  kHung,          // --hang-timeout: a worker killed as hung (signal); rank -1: the job stopped for a hang, no one named
  kNodeLost,      // a node vanished, went silent, was dropped, or did not come back to a restarted server: rank -1
  kAgentStopped,  // a node's ddprun received a stop signal: rank -1, signal
  kCannotStart,   // a node could not take part at all: rank -1, exit code 69
  kJoined,        // not a failure: a node joined (what a re-form names as its cause)
};
// "exited", "signaled", "hung", "node_lost", "agent_stopped", "cannot_start", "joined": the wire's and the events' word.
const char* to_string(FailureKind kind);

struct Failure {
  FailureKind kind = FailureKind::kExited;
  int node_rank = -1;
  std::string host;
  int rank = -1;        // global rank; -1 when the whole node failed
  int local_rank = -1;  // -1 when the whole node failed
  std::int64_t pid = 0;
  std::optional<int> exit_code;  // set when the worker exited
  std::optional<int> signal;     // set when the worker was killed by a signal
  std::int64_t time_unix_ms = 0;
  std::string error_file_contents;  // TORCHELASTIC_ERROR_FILE's contents, may be empty
  std::string message;              // why a node failed, or extra context; may be empty
  // A hang verdict that could not tell which of several silent ranks holds the others: `rank` is only the
  // first of them (the failure counts as a worker's, for restarts); every agent kills its silent workers.
  bool unsure = false;

  bool is_node_failure() const { return rank < 0; }
  friend bool operator==(const Failure& a, const Failure& b);
};

// The "cause" of a re-form for a newcomer (state_machine.cpp): no failure, a node joined. describe() says so.
inline constexpr const char* kJoinedMessage = "joined the job";
inline bool is_join(const Failure& f) { return f.kind == FailureKind::kJoined; }

// A node that could not take part at all (munged down there, no free rendezvous port): no worker ran, its
// message says why, and its exit code (69, ddprun's EX_UNAVAILABLE) is every node's (state_machine_start.cpp).
inline bool is_start_failure(const Failure& f) { return f.kind == FailureKind::kCannotStart; }
// A node's ddprun itself was stopped by a signal (Ctrl-C, scancel, kill): not a lost node, and never restarted.
inline bool is_agent_stopped(const Failure& f) { return f.kind == FailureKind::kAgentStopped; }

// Error files can be large; frames cannot. Contents beyond this are cut (with a marker) when serialised.
inline constexpr std::size_t kMaxErrorFileBytes = 64 * 1024;
// What from_json accepts from a peer; anything outside is a ProtocolError.
inline constexpr int kMaxSignal = 64;                    // Linux: 1..64 (SIGRTMAX)
inline constexpr int kMaxNodeRank = (1 << 20) - 1;       // kMaxNodes - 1 (protocol.hpp)
inline constexpr int kMaxRank = (1 << 30) - 1;           // global ranks: far beyond any world size
inline constexpr std::int64_t kMaxPid = 1 << 22;         // PID_MAX_LIMIT on 64-bit Linux
inline constexpr std::int64_t kMaxUnixMs = 1LL << 50;    // ~37 000 years after 1970
inline constexpr std::size_t kMaxMessageBytes = 16 * 1024;

// One line for people: "rank 3 (local rank 1, node 1, host gpu7, pid 4242) exited with code 1",
// "rank 0 (local rank 0, node 0, host gpu7) could not be started (exit code 127): cannot execute ..." (pid 0:
// its exec failed) or "node 2 (host gpu9) lost: missed heartbeats for 5.0 s".
std::string describe(const Failure& failure);

// The exit code ddprun leaves with for this root cause: the worker's code, 128+signal, or 1 for a lost node.
// Always 1..255: a "failure" whose exit code is 0 or out of range, or whose signal is not 1..64, maps to 1.
int exit_status_of(const Failure& failure);
// A worker its agent killed for hanging (--hang-timeout), or a job stopped for a hang.
inline bool is_hang(const Failure& failure) { return failure.kind == FailureKind::kHung; }

// JSON (de)serialisation; from_json throws ddprun::rendezvous::ProtocolError on missing, mistyped or
// out-of-range fields (exit code 0..255, signal 1..64, ranks >= -1 and both or neither -1, bounded strings).
void to_json(nlohmann::json& out, const Failure& failure);
void from_json(const nlohmann::json& in, Failure& failure);

}  // namespace ddprun::rendezvous
