// The rendezvous wire protocol, version 1: the messages and their JSON encoding, apart from any connection.
//
// Conversation (each message one frame, see framing.hpp):
//   server → challenge{proto, v, nonce, heartbeat intervals}    as soon as the connection is accepted
//   client → hello{v, run_id, mac, join fields}                 mac = HMAC-SHA256(token, nonce, run_id), auth.hpp
//                 (+ munge: a MUNGE credential over nonce and run id when the challenge asks, munge_auth.hpp)
//   server → error{kind, message} and closes                    refused: version, run id, token, node rank...;
//                                                               unavailable: a node could not start
//   (client → hello{..., cannot_join: why} instead of joining, when this node cannot take part)
//          | assignment{node rank, rank offset, round}           when every expected node has joined
//   client → heartbeat (every interval)       server → heartbeat (the reply proves the server is alive)
//   client → failure{Failure} | node_done{noticed} | stopped (restart round: local workers are down)
//   client → hang_view{suspect, held, ranks, stacks}  --hang-timeout: this node's workers' beats and stacks, when
//                                                its agent found one hung (suspect) or the server asked
//   server → capture to every other node of the round, on a suspect view: capture stacks, send hang_view
//   server → hang_deferred{quiet_ranks, wait_ms} to every node, when the views show a declared quiet phase
//   server → stop{root_cause, reason, restarting} to every node | complete{noticed} when every node is done
//   client → node_status{status, paces} (every few seconds) | view_request   server → job_view{nodes, ages_ms}
//   server → stragglers{named} to every node of the round, when the ranks named slow change
//   client → round_ready{round}: this node's workers can meet in the round (kept in place: at once; new ones:
//            once started far enough to meet, i.e. past their imports)
//   server → meet{round} to every node of the round once all are ready: workers kept in place take it up then
//            (a joiner's start, seconds of interpreter and imports, no longer stalls the others)
// Unknown message types and malformed fields are ProtocolErrors: the receiver closes that connection only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "rendezvous/failure.hpp"

namespace ddprun::rendezvous {

inline constexpr int kProtocolVersion = 2;  // 2: frames sealed after the hello (frame_seal.hpp)
inline constexpr const char* kProtocolName = "ddprun-rdzv";
// Bounds on what a peer may claim, so decoding never allocates on a peer's say-so; a field outside its bound
// is a ProtocolError (see also failure.hpp and json_fields.hpp).
inline constexpr int kMaxNodes = 1 << 20;
inline constexpr int kMaxNproc = 1 << 16;                // workers on one node
inline constexpr int kMaxRestarts = 1 << 20;
inline constexpr std::size_t kMaxRunIdBytes = 256;
inline constexpr std::size_t kMaxHexBytes = 128;         // MACs are 64 hex digits, nonces 32
inline constexpr std::size_t kMaxMungeCredentialBytes = 2048;  // ~250 bytes for our payload; fits a handshake frame
inline constexpr std::size_t kMaxTypeBytes = 32;         // "type", "kind", "proto"
// The heartbeat settings a server may impose (issue 55: an insider acting as server imposed 1 ms to 24 h, holding an
// agent for a day on a server gone silent): an interval of 10 ms to 10 min, a timeout of at most an hour. The same
// bounds are the options' (job_config.cpp validate).
inline constexpr std::int64_t kMinHeartbeatIntervalMs = 10;
inline constexpr std::int64_t kMaxHeartbeatIntervalMs = 10LL * 60 * 1000;
inline constexpr std::int64_t kMaxHeartbeatMs = 3600LL * 1000;
inline constexpr std::size_t kMaxCollectiveBytes = 64;  // a hang view's function name
inline constexpr std::int64_t kMaxFence = std::int64_t{1} << 53;  // an etcd revision; exact in any JSON reader

// ---- resume after a server restart (issue 19) ----
// A standalone server (ddprun-rendezvous: no agent of the job hosts it, ChallengeMsg::resumable) may die and be
// restarted while the workers train; they do not need it then. An agent that lost it keeps its workers and
// reconnects, and its hello says where the round it runs placed it: the restarted server rebuilds the round
// from every node's claim (state_machine_resume.cpp). A few bounded fields: the hello stays far below the
// handshake's 4 KiB however large the job (the nprocs travel as a fingerprint, each node brings its own).
struct ResumeClaim {
  int restart_count = 0;    // the round (TORCHELASTIC_RESTART_COUNT)
  int node_rank = 0;
  int nnodes = 0;
  int rank_offset = 0;
  int world_size = 0;
  std::string master_addr;
  int master_port = 0;
  std::string fingerprint;  // nprocs_fingerprint of the round's nprocs by node rank: every node's must agree
  std::string seat_secret;  // the secret whose commitment this node's hellos carry (auth.hpp); "" from old agents
  friend bool operator==(const ResumeClaim& a, const ResumeClaim& b);
};
struct Assignment;
ResumeClaim resume_claim_of(const Assignment& assignment);
// What a resumable server remembers of the round it runs, so that its restart takes the round back from the
// agents that held it and from no one else (issue 33): the round as every claim must state it (its node_rank,
// rank_offset and seat_secret unused) and each node rank's seat commitment ("" where a node brought none).
// ddprun-rendezvous keeps it in a private file (remembered_round.hpp) from each round's start to the job's end.
struct RememberedRound {
  ResumeClaim round;
  std::vector<std::string> seats;  // by node rank
  std::vector<std::string> hosts;  // by node rank: who held each place, for the verdict on one that does not come
};
// The round fields two claims of one round share (not the node's own: rank, offset, secret).
bool same_round(const ResumeClaim& a, const ResumeClaim& b);
// 16 hex digits (FNV-1a, 64 bits) over the worker counts by node rank: equal rounds give equal fingerprints.
std::string nprocs_fingerprint(const std::vector<int>& nprocs);
// ---- end of resume ----

// ---- client → server ----
struct HelloMsg {
  int version = kProtocolVersion;
  std::string run_id;
  std::string mac;                // hex HMAC-SHA256 proving the token, see auth.hpp
  std::optional<int> node_rank;   // static node ranks only
  int nproc = 0;                  // this node's worker count
  std::string host;               // hostname, for messages
  std::string address;            // how other nodes reach this one; empty = as the server sees it
  int master_port = 0;            // free port picked on this node; used if it becomes node 0
  std::string munge_credential;   // when the challenge asked for one; "" otherwise
  bool hosts_server = false;      // this node's agent hosts the server (absent on the wire when false)
  std::string seat;               // seat_commitment of this agent's secret (auth.hpp); "" (absent): none
  // Non-empty: this node cannot take part, and says why instead of joining (munged down here, say). A job
  // of fixed size still gathering its first round ends at once with it as the root cause, instead of waiting
  // --rdzv-timeout for a node that is not coming (state_machine.cpp, on_cannot_join).
  std::string cannot_join;
  // Set: this node runs a round its server placed it in, and comes back to a restarted server (issue 19).
  std::optional<ResumeClaim> resume;
  // Set: this node comes back to a restarted server between rounds (its server died during a re-form), its
  // workers down; the last round it ran. The restarted server numbers the round it gathers after it.
  std::optional<int> after_round;
};
struct HeartbeatMsg {};
struct FailureMsg { Failure failure; };
// Every local worker exited 0. noticed: a scheduler's notice (SIGUSR1/SIGUSR2) reached this node's running
// workers first: the job's end counts as a preemption on every node when one node's did (issue 54).
struct NodeDoneMsg {
  bool noticed = false;
};
// Restart round: every local worker is down, ready for the next round. master_port: a fresh MASTER_PORT for
// the next round if this node becomes node 0 (0: keep the one from the hello): a port ddprun picked is picked
// again every round, since another program may have taken it meanwhile; one the user gave is kept.
struct StoppedMsg {
  int master_port = 0;
};
// One worker as its agent saw it when a hang was judged (--hang-timeout): the job-wide verdict
// (hang_verdict.hpp) compares these across every node.
struct RankBeat {
  int rank = 0;
  int local_rank = 0;
  std::int64_t pid = 0;
  std::int64_t step = -1;      // the last step it gave with a beat; -1: none
  std::int64_t silent_ms = 0;  // since its last beat (since its start when it never beat)
  bool never_beat = false;
  bool hung = false;           // past the timeout by its own agent's judgement
  bool quiet = false;          // inside a quiet phase it declared (an evaluation, a save): silent by its word
  bool python_stack = false;   // its stacks (Python, or native for a C++ worker) say where it is: `collective`
  std::string collective;      // the collective it waits in ("all_reduce", "barrier", "backward" for DDP's
                               // gradient all-reduce, "gloo"/"nccl" from native frames); "" when none
  std::int64_t quiet_left_ms = 0;  // when quiet: how long its declared bound still runs (0: not said)
  bool stopped = false;        // its process was stopped (SIGSTOP, a debugger) when the capture began
  bool slow = false;           // named a straggler in this round when the capture began
  // Found hung by its own agent, and beat since, as of this view (issue 56: during a 1.9 s capture both flagged
  // ranks beat again, and the verdict still named them "silent for about 1.7 s"): `hung` is then false.
  bool recovered = false;
  friend bool operator==(const RankBeat& a, const RankBeat& b);
};
struct HangViewMsg {
  bool suspect = false;        // true: this agent found a hung worker; false: an answer to `capture`
  // This node's workers train on in the previous round: the new one is held for the joiners' workers (meet).
  // Their ranks are given in the new round's numbering, as the server judges it.
  bool held = false;
  std::vector<RankBeat> ranks;  // every running worker of the node
  std::string stacks;          // the node's stack file (its path there); "" when none was written
};
// The live view (agent/live_status.hpp): a node's status, sent every few seconds, kept by the server as the
// latest word of that node; and a node's request for every node's latest, for ddprun-status on that node.
// The status is JSON text the server keeps and hands back without reading it.
inline constexpr std::size_t kMaxNodeStatusBytes = 256 * 1024;
// Straggler naming (straggler_watch.hpp): a running rank's pace over the agent's window, in microseconds per
// step: its step time, and its own work per step where the worker says it (heartbeat slot +24; -1: not said).
inline constexpr std::int64_t kMaxPaceUs = std::int64_t{1} << 40;
struct RankPace {
  int rank = 0;
  std::int64_t step_us = 0;
  std::int64_t work_us = -1;
  friend bool operator==(const RankPace& a, const RankPace& b) {
    return a.rank == b.rank && a.step_us == b.step_us && a.work_us == b.work_us;
  }
};
struct NodeStatusMsg {
  std::string status;
  std::vector<RankPace> paces;  // at most kMaxNproc
};
struct ViewRequestMsg {};
// Before the hello: the agent's nonce, for the server's proof of this very connection (auth.hpp).
struct ProveMsg {
  std::string nonce;
};
// This node's workers can meet in round `round` (its restart count): the server tells every node when all can.
struct RoundReadyMsg {
  int round = 0;
};
using ClientMessage = std::variant<HelloMsg, HeartbeatMsg, FailureMsg, NodeDoneMsg, StoppedMsg, HangViewMsg,
                                   NodeStatusMsg, ViewRequestMsg, ProveMsg, RoundReadyMsg>;

// ---- server → client ----
struct ChallengeMsg {
  std::string protocol = kProtocolName;
  int version = kProtocolVersion;
  std::string nonce;
  std::int64_t heartbeat_interval_ms = 0;
  std::int64_t heartbeat_timeout_ms = 0;
  bool munge = false;  // the hello must carry a MUNGE credential (absent on the wire when false)
  std::string proof;   // auth.hpp compute_server_proof: this server knows the job's token and run id
  // No agent of the job hosts this server (ddprun-rendezvous): an agent that loses it keeps its workers and
  // reconnects with a resume hello (absent on the wire when false; issue 19).
  bool resumable = false;
  // This server takes round_ready and answers meet (absent on the wire when false: a server before them, which
  // would close a connection that sent round_ready as a protocol error).
  bool meets = true;
};

// Every setting a challenge imposes on the agent, as text its connection proof covers (auth.hpp): the protocol and
// version, the heartbeat interval and timeout, MUNGE, resumable, meets.
std::string challenge_settings(const ChallengeMsg& challenge);

// kUnavailable: a node of the job could not start (it said why: cannot_join, or node 0's server answers only
// that); every node ends with ddprun's exit code 69, as the node that failed.
enum class ErrorKind { kRefused, kTimeout, kLostServer, kProtocol, kUnavailable };
const char* to_string(ErrorKind kind);
struct ErrorMsg { ErrorKind kind = ErrorKind::kRefused; std::string message; };

// What every agent learns when the rendezvous completes (and again at each restart round).
struct Assignment {
  int node_rank = 0;
  int nnodes = 0;
  int rank_offset = 0;         // global rank of this node's local rank 0: sum of nprocs of lower node ranks
  int world_size = 0;
  std::vector<int> nprocs;     // worker count of each node, by node rank
  std::string master_addr;     // node 0's address as the other nodes reach it
  int master_port = 0;
  std::string run_id;
  int restart_count = 0;
  int max_restarts = 0;
  // The fencing token of the host that formed the round (issue 53, invariant 1): the etcd revision that created the
  // coordinator key it holds; 0 when no election decides the host. An agent never starts a round whose token is
  // below one it has seen: that host was replaced (agent/rendezvous_link_elected.cpp).
  std::int64_t fence = 0;

  int local_world_size() const { return nprocs.at(static_cast<std::size_t>(node_rank)); }
  friend bool operator==(const Assignment& a, const Assignment& b);
};

// The part of an assignment shared by every node of a round; encoded once per round, not once per node.
struct Round {
  int nnodes = 0;
  int world_size = 0;
  std::vector<std::pair<int, int>> nprocs_runs;  // run-length encoded nprocs: (nproc, count of nodes)
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  int restart_count = 0;
  int max_restarts = 0;
  std::int64_t fence = 0;  // Assignment::fence (absent on the wire when 0)
};

struct HeartbeatAckMsg {};
struct StopMsg {
  Failure root_cause;
  std::string reason;
  bool restarting = false;  // true: tear down, send `stopped`, and wait for the next round's assignment
  // A re-form because nodes joined (elastic): nothing failed; root_cause names the joining node only.
  bool membership = false;
  // To a node dropped from an elastic job that re-forms without it (missed heartbeats: perhaps only paused):
  // once its stale workers are gone it may join again, as a new node (a plain hello).
  bool rejoin = false;
};
// Every worker on every node exited 0. noticed: a notice reached the running workers of some node, so every
// node ends the job as preempted under SLURM (79), whichever of them the notice reached, and when.
struct CompleteMsg {
  bool noticed = false;
};
struct CaptureMsg {};
// The job-wide hang inquiry found ranks inside a quiet phase they declared (a save, an evaluation): the ranks
// silent beside them wait for them, so nobody is hung yet. Every node exempts its silent workers for `wait_ms`
// (the longest declared bound still running); a phase that ends earlier beats, and the watch goes on from there.
inline constexpr std::int64_t kMaxQuietWaitMs = 7LL * 24 * 3600 * 1000;
// A hang inquiry that ends without a verdict: ranks inside a declared quiet phase (the silent ones wait for them,
// wait_ms the longest bound left), or ranks found hung that beat again during the capture (`recovered`; quiet_ranks
// empty, wait_ms 0): nobody is hung, the watch goes on.
struct HangDeferredMsg {
  std::vector<int> quiet_ranks;  // at most kMaxStragglers listed
  std::int64_t wait_ms = 0;
  std::vector<int> recovered;    // at most kMaxStragglers listed; absent on the wire when empty
  friend bool operator==(const HangDeferredMsg& a, const HangDeferredMsg& b) {
    return a.quiet_ranks == b.quiet_ranks && a.wait_ms == b.wait_ms && a.recovered == b.recovered;
  }
};
// The answer to view_request: every connected node's latest status (JSON text each), and how old each is.
struct JobViewMsg {
  std::vector<std::string> nodes;
  std::vector<std::int64_t> ages_ms;
};  // a hang was found elsewhere: capture every worker's stacks and answer with hang_view
// The ranks the server names stragglers now, sent to every node when the set changes (empty: none left).
inline constexpr std::size_t kMaxStragglers = 1024;
struct Straggler {
  int rank = 0;
  int node_rank = 0;
  std::string host;
  std::int64_t pace_us = 0;    // its work (or step time) per step
  std::int64_t median_us = 0;  // the other ranks' median of the same
  bool work = false;           // compared by own work per step; false: by step time
  friend bool operator==(const Straggler& a, const Straggler& b) {
    return a.rank == b.rank && a.node_rank == b.node_rank && a.host == b.host && a.pace_us == b.pace_us &&
           a.median_us == b.median_us && a.work == b.work;
  }
};
struct StragglersMsg {
  std::vector<Straggler> named;
};
// The answer to ProveMsg: compute_connection_proof over both nonces (auth.hpp).
struct ProofMsg {
  std::string proof;
};
// Every node of round `round` said round_ready: the workers that stay in place may take the round up now.
struct MeetMsg {
  int round = 0;
};
using ServerMessage = std::variant<ChallengeMsg, ErrorMsg, Assignment, HeartbeatAckMsg, StopMsg, CompleteMsg,
                                   CaptureMsg, JobViewMsg, StragglersMsg, HangDeferredMsg, ProofMsg, MeetMsg>;

// ---- encoding: payloads (JSON text), not frames ----
std::string encode(const ClientMessage& message);
std::string encode(const ServerMessage& message);
std::string encode_round(const Round& round);  // a JSON fragment for encode_assignment
std::string encode_assignment(std::string_view round_fragment, int node_rank, int rank_offset);
// Builds the Round (with run-length nprocs) from per-node counts.
Round make_round(const std::vector<int>& nprocs, std::string master_addr, int master_port, std::string run_id,
                 int restart_count, int max_restarts);

// ---- decoding: throw ProtocolError on anything malformed ----
ClientMessage decode_client_message(std::string_view payload);
ServerMessage decode_server_message(std::string_view payload);

}  // namespace ddprun::rendezvous
