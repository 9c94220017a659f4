// The agent's half of "at most one round of a job runs workers at any time" (issue 53, invariant 1).
//
// An elastic job re-forms without a node whose agent fell silent (missed heartbeats): the server cannot tell a dead
// machine from a cut link, and behind a cut the node's agent and workers still run. Before 2026-12 such a node kept
// training in the old round for as long as it tried to reconnect (the nemesis's seeds 11 and 12: ~17 s beside the
// round the others formed without it). Now the two sides keep one bound:
//   - the agent that has heard nothing from its server for the heartbeat timeout stops its workers at once, with
//     SIGKILL (they belong to a round that may already be going on without them), then joins the job again as a
//     new node, as a node dropped for its silence does when it hears so (NodeAgent::rejoin_after_drop);
//   - the server starts no round without a node it dropped for its silence before that node's last word + the
//     heartbeat timeout + round_fence_margin (rendezvous/state_machine_cut_off.cpp, fenced_until).
// Only where a round can form without this node: an elastic job (MIN < MAX), this node not hosting the server (the
// job cannot re-form without that one), workers running, and a silence (a closed or reset connection means the
// server's process is gone: it forms nothing, and a successor takes the running round back from the nodes' claims).
#pragma once

#include <chrono>
#include <string>

namespace ddprun::agent {

struct RoundFenceCase {
  bool elastic = false;          // --nnodes MIN:MAX with MIN < MAX
  bool hosting = false;          // this node hosts the job's rendezvous server
  bool workers_running = false;  // a round's workers run here and nothing stops them yet
  bool server_silent = false;    // the server was lost to its silence (rendezvous::Client::lost_silently)
};

bool round_fence_applies(const RoundFenceCase& c);

// What the log and the summary's earlier rounds say: why, and what it protects.
std::string round_fence_reason(const std::string& lost_why);

}  // namespace ddprun::agent
