// The timeout chain: every default bound that another bound depends on, declared once, with its order checked
// at compile time (issue 31: they were scattered defaults, and a change to one silently broke another's
// assumption). Where a bound is an option (--heartbeat-timeout, --term-timeout), this is its default; the
// options' checks keep a user's values in the same order where the program needs it. docs/DESIGN-NOTES.md,
// "The timeout chain", says why each link is where it is.
#pragma once

#include <chrono>

namespace ddprun::timeouts {

using std::chrono::milliseconds;

// A timer this late means the process did not run (stopped, frozen, starved): far above a loaded loop's jitter.
inline constexpr milliseconds kStallThreshold{500};

// --- liveness of the nodes (rendezvous) ---
inline constexpr milliseconds kHeartbeatInterval{1000};   // --heartbeat-interval: an agent's beat to the server
inline constexpr milliseconds kConnectAttempt{3000};      // one connect to the server, within --rdzv-timeout
inline constexpr milliseconds kStatusPeriod{5000};        // a node's live-view status and straggler paces
inline constexpr milliseconds kHeartbeatTimeout{15000};   // --heartbeat-timeout: torchrun's 5 s keep-alive x 3
inline constexpr milliseconds kFenceKillMargin{1000};     // a silent node's agent SIGKILLs and reaps its workers
inline constexpr milliseconds kTermTimeout{30000};        // --term-timeout: SIGTERM to SIGKILL; also how long a
                                                          // re-formed round waits for its workers to take it up

// --- the rendezvous on etcd (etcd/coordinator_election.hpp; issue 57: they were literals in etcd/) ---
inline constexpr milliseconds kEtcdRequest{2000};       // one request to one etcd endpoint, then the next endpoint
inline constexpr milliseconds kEtcdRetry{500};          // a failed request is asked again after this
inline constexpr milliseconds kEtcdLeaseTtl{10000};     // the coordinator's lease: a host gone this long frees its key
inline constexpr milliseconds kEtcdKeepAlive = kEtcdLeaseTtl / 3;  // the host renews its lease this often
inline constexpr milliseconds kEtcdLapseMargin = kEtcdLeaseTtl / 2;  // a host's lease counts as lapsing this early
inline constexpr milliseconds kEtcdConfirmLease{2000};  // a host renews its lease before forming a round, at most
inline constexpr milliseconds kEtcdLearnEnd{5000};      // a node that lost its host reads the job's end, at most
inline constexpr milliseconds kEtcdRoundLeaseTtl{60000};  // the kept round outlives its host this long
inline constexpr milliseconds kEtcdReadTimeout{60000};  // --rdzv-conf read_timeout: etcd unanswered this long

// --- a hang's inquiry (--hang-timeout) ---
inline constexpr milliseconds kStackCapture{5000};   // a node's stack tools and Python stacks
inline constexpr milliseconds kNcclDump{15000};      // a Flight Recorder dump (a process's first takes 5-7 s)
inline constexpr milliseconds kHangInquiry{20000};   // the server waits this long for every node's view
inline constexpr milliseconds kHangVerdict{25000};   // a node waits this long for the verdict, then decides alone

// --- a worker that raised (agent/error_file_watch.hpp) ---
// Its error file is whole: it has this much of its own time (time spent waiting for a CPU not counted, up to the
// limit in wall time) to exit its own way, which ends the job with its real exit as before; still exiting after
// it, it is failed with code 1 and the job torn down. What is cut: the interpreter's slow exit (a process group's
// destructor, atexit, thread joins), which took ~1 s of a 1 s teardown (issue 35). A program that writes the file
// and exits at once (the SDK's run_main, a C++ writer with a code of its own) needs microseconds of it.
inline constexpr milliseconds kRaisedExitGrace{50};
inline constexpr milliseconds kRaisedExitGraceLimit{1000};
// The watch begins this long after a round's workers start (a file written before is read then): a round over
// sooner (`/bin/true`, a quick tool) never pays its cost at the job's end, and a Python worker is still importing
// torch by then (an exception in its first second takes the exit's path, as before).
inline constexpr milliseconds kErrorFileWatchDelay{1000};

// For options given in seconds (as doubles, or as text).
constexpr double seconds_of(milliseconds m) { return static_cast<double>(m.count()) / 1000.0; }

// A stall is not a missed heartbeat; a beat comes several times within a timeout.
static_assert(kStallThreshold < kHeartbeatInterval);
static_assert(kHeartbeatInterval * 3 <= kHeartbeatTimeout);
// A connect attempt that hangs costs less than the silence that loses a node.
static_assert(kConnectAttempt < kHeartbeatTimeout);
// A node's status reaches the server at least twice within the time after which that node counts as lost, so a
// live view never shows a node as stale while the server still counts it alive.
static_assert(kStatusPeriod * 2 <= kHeartbeatTimeout);
// A re-formed round waits longer for its workers than the server waits for a silent node: a worker rebuilding
// its process group is not given up on before the node it runs on would be.
static_assert(kHeartbeatTimeout < kTermTimeout);
// etcd: a request that fails over to the next endpoint, and a retry, fit several times in a keep-alive period, so
// one dead member (the leader, say) never costs the host its lease; the renewal before a round fits in one period
// too, and within the heartbeat timeout the nodes give a host while the round's messages wait behind it.
static_assert(kEtcdRetry < kEtcdRequest);
static_assert(kEtcdRequest + kEtcdRetry < kEtcdKeepAlive);
static_assert(kEtcdConfirmLease <= kEtcdKeepAlive && kEtcdConfirmLease < kHeartbeatTimeout);
// The kept round outlives the lease of the host that kept it, so a successor elected once that lease ran out reads
// it; a node's read of the end is short beside etcd's own read timeout.
static_assert(kEtcdLeaseTtl < kEtcdRoundLeaseTtl);
// A lapsing lease is one keep-alive late at least (no false alarm for one slow answer), and leaves the host more
// than the silence it then tolerates (3 heartbeat intervals, rendezvous/job_config.hpp lapse_silence) and a beat
// to find a lost node and stop its round before the lease can run out.
static_assert(kEtcdKeepAlive < kEtcdLeaseTtl - kEtcdLapseMargin && kEtcdLapseMargin < kEtcdLeaseTtl);
static_assert(kHeartbeatInterval * 3 + kHeartbeatInterval < kEtcdLapseMargin);
static_assert(kEtcdLearnEnd < kEtcdReadTimeout);
// The inquiry: the stacks, then the dumps, fit within the server's wait for the views, which ends before the
// noticing node gives up on the verdict, with room for a loaded machine at each step.
static_assert(kStackCapture <= kNcclDump);
static_assert(kNcclDump < kHangInquiry);
static_assert(kHangInquiry < kHangVerdict);
// The raiser's grace, however loaded the machine, is shorter than the exit it cuts short (~1 s) and far from the
// teardown's SIGKILL.
static_assert(kRaisedExitGrace < kRaisedExitGraceLimit);
static_assert(kRaisedExitGraceLimit * 10 <= kTermTimeout);

}  // namespace ddprun::timeouts
