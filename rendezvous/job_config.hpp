// What the rendezvous server is told about the job: passed by value, validated once.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>


#include "common/timeouts.hpp"
#include "rendezvous/framing.hpp"
#include "rendezvous/protocol.hpp"
#include "rendezvous/straggler_watch.hpp"

namespace ddprun::rendezvous {

// Elastic: when a node that joins a running job is placed. Every re-form costs every node its progress since
// its last checkpoint, so a job may choose to take newcomers only when it re-forms anyway.
//   kNow       its arrival re-forms the job (torchrun's behaviour), but not before the current round has run
//              join_min_interval: until then joiners wait, and are placed together when it has passed.
//   kAtFailure it waits, unplaced, until the job re-forms for another reason (a worker failure's restart, a
//              node lost or stopped) and is placed in that round: kNow with an infinite interval.
// Either way a waiting joiner is placed by any re-form, and told `complete` if the job completes first.
enum class JoinPolicy { kNow, kAtFailure };
const char* to_string(JoinPolicy policy);
// "now" or "at_failure"; false for anything else.
bool parse_join_policy(std::string_view text, JoinPolicy& policy);
inline constexpr const char* kJoinPolicyValues = "now or at_failure";

struct JobConfig {
  std::string run_id;
  std::string token;   // the shared secret agents must prove they hold (auth.hpp)
  // The token is derived from public facts (the run id, perhaps scoped to a SLURM step): the server warns when
  // it listens beyond loopback with it. Set by the launcher; ddprun-rendezvous recognises the run id's own.
  bool public_token = false;
  // Every node must also bring a MUNGE credential of the server's own uid, bound to its nonce and the run
  // (munge_auth.hpp); the token still applies. munge_socket: munged's socket, "" = libmunge's default.
  bool require_munge = false;
  std::string munge_socket;
  // Expected nodes: --nnodes N is min = max = N; an elastic range min:max waits `last_call` after min joined.
  int min_nodes = 1;
  int max_nodes = 1;
  // Static: every node brings its node rank (--node-rank, SLURM_NODEID); needs min == max.
  // Dynamic: the server assigns node ranks, sorted by (host, address, join order), so the same set of
  // machines gets the same ranks every time.
  bool static_node_ranks = false;
  std::chrono::milliseconds heartbeat_interval = timeouts::kHeartbeatInterval;  // told to every client in the challenge
  std::chrono::milliseconds heartbeat_timeout = timeouts::kHeartbeatTimeout;   // silence after which a node (or the server) is lost
  std::chrono::milliseconds join_timeout{900'000};     // --rdzv-timeout: server start → all nodes joined
  // --join-grace (a fixed node count only; 0: off): the nodes all start together (a SLURM step's tasks) and none
  // can be replaced, so a place still empty this long after the last node joined or left ends the rendezvous:
  // a node that failed before joining, or died after, costs the others this, not join_timeout.
  std::chrono::milliseconds join_grace{0};
  std::chrono::milliseconds last_call{30'000};         // elastic only, see above
  int max_restarts = 0;                                // restart rounds after worker failures
  // Elastic: a host that left the job this many times (lost, or its ddprun stopped, after being placed) is not
  // admitted again: a flapping node would otherwise re-form the job forever (each re-form costs every node its
  // progress since the last checkpoint). A departure itself uses no restart while MIN nodes remain.
  int max_departures = 3;
  JoinPolicy join_policy = JoinPolicy::kNow;           // see JoinPolicy
  std::chrono::milliseconds join_min_interval{0};      // kNow only: a round runs this long before a join ends it
  StragglerRule stragglers;                            // straggler naming (straggler_watch.hpp)
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;  // after authentication; kHandshakeMaxFrameBytes before
  // Connections that have not joined (no hello yet, or refused and closing) held at once; 0 = the larger
  // of 1024 and 64 + 4 x max_nodes. Beyond it the oldest such connection is closed to admit the new one: a flood of strangers
  // costs bounded memory, and a real agent, whose hello follows its connect within a round trip, still
  // gets in (the newest connection is the one most likely to be about to say hello).
  std::size_t max_pending_connections = 0;
  // Unsent bytes a peer may leave queued before it is closed (and, once joined, counts as lost). Must hold
  // at least one largest frame.
  std::size_t max_outbox_bytes = 4 * kDefaultMaxFrameBytes;
  // No agent of the job hosts this server (ddprun-rendezvous): the challenge says so, and an agent that loses
  // the server keeps its workers and comes back to a restarted one, which rebuilds the round from the
  // agents' claims (state_machine_resume.cpp). False where an agent hosts it: its node dies with it anyway.
  bool resumable = false;
  // A resumable server that hears from no node at all suspects its own link, and keeps the round this long for
  // the nodes to come back before it judges them (state_machine_cut_off.cpp): the agents' default
  // --rdzv-reconnect-timeout, as long as they keep reconnecting. 0: judged at the heartbeat timeout, as before.
  std::chrono::milliseconds reconnect_grace{60'000};
  // A resumable server restarted under a running job: the round its previous run remembered (from its file,
  // remembered_round.hpp). Only a claim of that round, with the secret behind the claimed node rank's seat,
  // takes a place back; without it, the first claim defines the round (a server restarted elsewhere).
  std::optional<RememberedRound> remembered;
  // A token equal to run_id_token(run_id) (auth.hpp, the launcher's fallback) is no secret: the server warns
  // loudly when it listens beyond loopback with it.
};

// Elastic: the node count may change between rounds (dynamic node ranks, min < max).
inline bool is_elastic(const JobConfig& config) {
  return !config.static_node_ranks && config.min_nodes < config.max_nodes;
}

// max_pending_connections with the default applied.
std::size_t pending_connection_limit(const JobConfig& config);

// The interval the server tells its agents to beat at: --heartbeat-interval, or longer for a large job, so that
// the server receives at most kMaxHeartbeatsPerSecond (issue 33: at 10 000 nodes a beat a second from each was
// half the server's CPU, and a network's share of it grows the same way), but never longer than a third of
// --heartbeat-timeout, so that a node still beats three times within the silence that loses it (torchrun's
// keep-alive: 5 s, 3 attempts). 10 000 nodes beat every 5 s, 4 000 every 2 s, up to 2 000 every second; an
// interval given longer than that stands. The server applies it to its own copy of the config (Server), so its
// challenge, its tick and its cut-off rules all use the interval the agents use.
inline constexpr int kMaxHeartbeatsPerSecond = 2000;
std::chrono::milliseconds heartbeat_interval_for(const JobConfig& config);
// How long after a silent node's heartbeat timeout its agent has surely stopped its workers (it sees the silence at
// its next heartbeat tick, its last word from the server may be an interval younger than the server's from it, and
// the SIGKILL and reap take a moment): an elastic job starts no round without that node before (issue 53).
std::chrono::milliseconds round_fence_margin(const JobConfig& config);
// The silence after which a host whose etcd lease is lapsing judges a node of its running round lost (issue 53,
// invariant 2): three heartbeat intervals, at most half the heartbeat timeout. Well inside the lapse margin
// (common/timeouts.hpp), so the round stops before the lease can run out and another host be elected.
std::chrono::milliseconds lapse_silence(const JobConfig& config);

// Throws ddprun::rendezvous::RendezvousError with a message fit for a user if the config is inconsistent.
void validate(const JobConfig& config);

}  // namespace ddprun::rendezvous
