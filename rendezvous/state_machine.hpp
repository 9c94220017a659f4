// Every rendezvous rule, as one deterministic function: step(state, event, now) → actions.
//
// No clock reads, no I/O, no randomness: time comes in as `now`, bytes are the server's business (server.hpp
// turns frames into Events and Actions into frames). `step` updates the state in place, which is the same
// function as returning a new state; copying 10k nodes per event would make a 10k-node join O(n²).
// Every rule has a unit test in tests/rendezvous/state_machine_*_test.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/log.hpp"
#include "rendezvous/job_config.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

using ConnId = std::uint64_t;  // the server numbers its connections from 1
using Clock = std::chrono::steady_clock;

// Deadlines use the monotonic time; failure records carry wall time.
struct Now {
  Clock::time_point steady;
  std::int64_t unix_ms = 0;
};

// Lifecycle of a job at the server:
//   kJoining → kRunning               every expected node joined (elastic: min joined and last call passed)
//   kJoining → kStopped               join timeout with nodes missing, or a failure reported before start
//   kRunning → kComplete              every node of the round reported all its workers exited 0
//   kRunning → kStopped               a failure (worker or node) with no restart left, or a node gone with
//                                     fewer than min_nodes left
//   kRunning → kRestarting → kRunning the job re-forms: every node of the round stops its workers, says
//                                     `stopped`, and gets the next round's assignment. Causes: a worker failure
//                                     with restarts left (same nodes, same node ranks); a node lost or stopped
//                                     with restarts left and at least min_nodes left (the rest, ranks kept
//                                     contiguous); a node joining an elastic job that has room (no restart used;
//                                     when, config.join_policy says: at once, once the round has run
//                                     join_min_interval, or never for a join alone: it waits for another cause)
//   kRestarting → kStopped            a node gone during the re-form with fewer than min_nodes left
// kStopped and kComplete are final: joins are refused, late failures (the teardown's victims) are ignored.
// restart_count counts rounds after the first, whatever re-formed them, and is the same for every node of a
// round (TORCHELASTIC_RESTART_COUNT); failure_restarts counts those charged to max_restarts (joins are free,
// as in torchrun).
enum class Phase { kJoining, kRunning, kRestarting, kStopped, kComplete };
const char* to_string(Phase phase);

struct NodeEntry {
  ConnId conn = 0;
  int node_rank = -1;          // static: from the hello; dynamic: -1 until placed in a round (an elastic
                               // job's late joiner waits so until the next re-form)
  int nproc = 0;
  int rank_offset = -1;        // its first global rank in the round it was placed in (-1: none yet)
  std::string host;
  std::string address;         // as the other nodes reach it
  bool loopback = false;       // reached the server from its own machine (loopback, or one of its own addresses)
  bool hosts_server = false;   // its agent hosts this server: the job cannot go on without it
  // Its agent's seat commitment (auth.hpp): a resume hello takes this place back only with the secret behind it;
  // a new hello takes over a silent place of the same host only with the same commitment. "": an old agent.
  std::string seat_commit;
  int master_port = 0;
  std::uint64_t join_seq = 0;  // join order, the last tie-breaker for dynamic node ranks
  Clock::time_point last_seen;
  // Not judged for its silence before this: a silent node's fresh heartbeat timeout once this server's own link
  // is back (state_machine_cut_off.cpp). Its deadlines queued earlier pass without a verdict.
  Clock::time_point spared_until{};
  // Until then a resume hello may take its place even if its old connection spoke lately: the node was in a
  // silence of every node, and what its abandoned connection delivers after the heal is no proof its agent is
  // still on it (state_machine_cut_off.cpp).
  Clock::time_point reclaimable_until{};
  bool done = false;           // all its workers exited 0 (this round)
  bool stopped = false;        // restart round: its workers are down
  bool ready = false;          // its workers can meet in this round (round_ready)
};

struct RendezvousState {
  RendezvousState(JobConfig job, Clock::time_point started_at);

  JobConfig config;
  Phase phase = Phase::kJoining;
  Clock::time_point started;
  std::optional<Clock::time_point> last_call_deadline;
  // config.join_grace: the rendezvous ends here unless the round forms or a node joins or leaves first.
  std::optional<Clock::time_point> join_grace_deadline;
  std::unordered_map<ConnId, NodeEntry> nodes;  // joined nodes still connected
  // host → conn of every node added (rules::add_node), for finding a host's own silent connection in O(1) per
  // hello; entries of nodes gone are dropped when met, and the index is rebuilt when they outnumber the nodes.
  std::unordered_multimap<std::string, ConnId> by_host;
  std::vector<ConnId> by_rank;                   // node rank → conn (0 = empty slot: a static rank not yet
                                                 // joined, or a node gone during a re-form)
  int round_size = 0;                            // nodes of the current round still connected
  Clock::time_point round_started{};             // when the current round started (join_min_interval)
  // Heartbeat deadlines in arrival order. `now` never goes back, so pushes keep it sorted; entries made
  // stale by a later heartbeat are skipped when popped. O(1) per heartbeat, no per-node timer.
  std::deque<std::pair<Clock::time_point, ConnId>> deadlines;
  std::string server_address;                    // the server's address as nodes on other machines reached it
  std::optional<Failure> root_cause;
  std::int64_t joined_procs = 0;  // workers of the joined nodes: the world size, bounded by kMaxRank + 1
  int restart_count = 0;     // rounds after the first
  int failure_restarts = 0;  // of those, the ones charged to config.max_restarts (worker failures only)
  std::map<std::string, int> departures;  // elastic: host → times it left after being placed (max_departures)
  int done_count = 0;
  // Issue 53, invariant 1: no round starts before this. A node dropped for its silence (a cut link, not a dead
  // machine) may still run its workers until its agent, hearing nothing, stops them (agent/round_fence.hpp):
  // its last word here + the heartbeat timeout + round_fence_margin. Cleared when a round starts.
  std::optional<Clock::time_point> fenced_until;
  // This server's host could not renew its etcd lease lately (LeaseStanding): another host may be elected once it
  // runs out, so the running round goes on only while every node of it is heard (lapse_silence).
  bool lease_lapsing = false;
  // A node's done said a scheduler's notice reached its running workers: the completion says so to every node,
  // which then ends as preempted (79 under SLURM) alike (issue 54). Kept across rounds, as the agent keeps it.
  bool noticed = false;
  int stopped_count = 0;
  int ready_count = 0;  // nodes of the round that said round_ready; all: every node is told to meet
  // --hang-timeout: a node reported a hung worker; every node of the round is asked for its workers' beats
  // and stacks, and the verdict (hang_verdict.hpp) is given once all answered or at the deadline. Exists
  // only while kRunning.
  struct HangInquiry {
    Clock::time_point deadline;
    std::map<ConnId, HangViewMsg> views;
    std::map<ConnId, Clock::time_point> received;  // when each view came: silences compared as of the verdict
  };
  std::optional<HangInquiry> hang;
  std::uint64_t next_join_seq = 0;
  // A restarted server taking back the round its agents still run (state_machine_resume.cpp): while set, the
  // phase is kJoining and by_rank holds the nodes that resumed at their claimed ranks. Once every node of the
  // claimed round is back (or the deadline passed) the round runs as if this server had assigned it.
  struct Adoption {
    ResumeClaim claim;                   // the first node's claim: every later one must agree with it
    Clock::time_point deadline;          // the nodes not back by then count as lost
    std::vector<int> nprocs;             // by claimed node rank, 0 until that node is back
    std::vector<int> rank_offsets;       // as each node claimed it, checked against nprocs when complete
    // Reports made before the round was whole, replayed once it is: a failure, or (nullopt) node_done.
    std::vector<std::pair<ConnId, std::optional<Failure>>> held;
    // Hang views sent before the round was whole (a node re-sends its pending inquiry's view on resume),
    // replayed once it is: an inquiry lost with the old server is asked again (issue 32).
    std::vector<std::pair<ConnId, HangViewMsg>> held_views;
  };
  std::optional<Adoption> adopting;
  // A resumable server that heard from no node of the running round (state_machine_cut_off.cpp): since when it
  // suspects its own link instead of judging the nodes.
  std::optional<Clock::time_point> cut_off_since;
  // Node ranks of the round judged lost for their silence, not told since: one cut off (not dead) comes back
  // asking, and hears the job's root cause like every other node (state_machine_cut_off.cpp). The hosting
  // agent lingers a heartbeat timeout for them once the job has stopped.
  std::set<int> untold_silent;
  // Nodes that joined and then left or went silent before the round started (the latest few): the rendezvous
  // timeout names them, not only the ranks missing (a partition during the rendezvous, issue 37).
  struct Departure {
    int node_rank = -1;  // static: its rank; dynamic: -1
    std::string host;
    std::string text;  // "node 1 (host \"h\", 10.0.0.2) joined, then went silent (missed heartbeats for 15.0 s)"
  };
  std::deque<Departure> left_while_joining;
  // A start failure (state_machine_start.cpp) ended the job before its first round: how many nodes know it
  // (the failing one, those joined then, late ones told since). The hosting agent lingers until all do.
  int informed = 0;
};

// The answer to a hello that failed authentication (a wrong token or run id; with MUNGE, or not the job's user):
// the same whichever failed, so a stranger cannot tell which.
std::string auth_failed_message(const JobConfig& config);

// Every node the job expects knows of the start failure that ended it (the host may go).
bool every_node_informed(const RendezvousState& state);
// The job stopped, and a node judged lost for its silence has not come back to hear it (untold_silent): the
// hosting agent waits for it a heartbeat timeout (state_machine_cut_off.cpp).
bool telling_the_silent(const RendezvousState& state);

// ---- events: what the server observed ----
struct Hello {                // an authenticated-or-not hello; the machine checks it
  ConnId conn = 0;
  std::string nonce;          // the challenge this connection was sent
  HelloMsg hello;
  std::string peer_address;   // the agent's address as the server sees it
  std::string local_address;  // the server's address on this connection
  // The server's MUNGE check of the hello's credential (munge_auth.hpp), when the job requires one: the
  // machine stays pure, the server does the round trip to munged. Unchecked counts as failed.
  bool munge_ok = false;
  std::string munge_problem;  // why not, for the log
};
struct Heartbeat { ConnId conn = 0; };
struct FailureReport { ConnId conn = 0; Failure failure; };
struct NodeDone { ConnId conn = 0; bool noticed = false; };
struct NodeStopped { ConnId conn = 0; int master_port = 0; };  // master_port: the node's new offer, 0: keep
struct HangReport { ConnId conn = 0; HangViewMsg view; };  // --hang-timeout: a node's workers, judged
struct RoundReady { ConnId conn = 0; int round = 0; };       // its workers can meet in round `round`
struct Disconnected {
  ConnId conn = 0;
  std::string reason;
  // This server did not run for a while just before (its agent SIGSTOPped, a frozen VM): a node that gave it up
  // meanwhile reset its connection and comes back asking (client_reconnect.hpp); its place waits for it.
  bool after_stall = false;
  // The peer reset the connection: its agent gave this server up (nothing heard for its heartbeat timeout: a cut
  // into it, while its own frames got through) and asks again (client_reconnect.hpp); an exit closes with a FIN.
  bool reset = false;
};
// This server's own node cannot take part (node 0's munged is down): the job ends before it starts, and every
// node that comes is told why (kUnavailable) instead of waiting --rdzv-timeout for it.
struct CannotStart { Failure failure; };
struct Tick {};  // time passed; the server sends one at least every heartbeat_interval / 2
// The host's etcd lease is lapsing (etcd has not renewed it for a while: lapsing), or renewed again (issue 53,
// invariant 2; state_machine_lease.cpp).
struct LeaseStanding { bool lapsing = false; };
using Event =
    std::variant<Hello, Heartbeat, FailureReport, NodeDone, NodeStopped, Disconnected, Tick, HangReport, CannotStart,
                 RoundReady, LeaseStanding>;

// ---- actions: what the server must do, in order ----
struct Send { ConnId conn = 0; ServerMessage message; };
struct Slot { ConnId conn = 0; int node_rank = 0; int rank_offset = 0; };
struct SendAssignments { Round round; std::vector<Slot> slots; };  // the round is encoded once
struct Broadcast { std::vector<ConnId> conns; ServerMessage message; };  // encoded once
struct Close { ConnId conn = 0; };  // after the frames queued for it are written
struct Log { LogLevel level = LogLevel::kInfo; std::string text; };
// A resumable server's round started (or was taken back): what its restart must find (remembered_round.hpp).
struct RememberRound { RememberedRound round; };
using Action = std::variant<Send, SendAssignments, Broadcast, Close, Log, RememberRound>;

std::vector<Action> step(RendezvousState& state, const Event& event, const Now& now);

// When the next Tick has something to decide, for servers that schedule precisely (nullopt: nothing pending).
std::optional<Clock::time_point> next_deadline(const RendezvousState& state);

}  // namespace ddprun::rendezvous
