// The job-wide rendezvous settings: checked once, here, whoever made them (ddprun's command line, the
// standalone ddprun-rendezvous).
#include "rendezvous/job_config.hpp"

#include <algorithm>
#include <string>

#include "common/error.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

void validate(const JobConfig& config) {
  // Messages name the options, which ddprun and ddprun-rendezvous spell the same: the one place a
  // rendezvous setting is checked, for the launcher (exit 64) and the standalone server alike.
  auto fail = [](const std::string& what) { throw RendezvousError(what); };
  if (config.run_id.empty()) fail("--rdzv-id: the run id is empty");
  if (config.run_id.size() > kMaxRunIdBytes)
    fail("--rdzv-id: the run id is longer than " + std::to_string(kMaxRunIdBytes) + " bytes");
  if (config.token.empty()) fail("the job token is empty (--rdzv-token, --rdzv-token-file or DDPRUN_TOKEN)");
  if (config.min_nodes < 1 || config.max_nodes < config.min_nodes || config.max_nodes > kMaxNodes)
    fail("--nnodes: expected nodes must satisfy 1 <= MIN <= MAX <= " + std::to_string(kMaxNodes));
  if (config.static_node_ranks && config.min_nodes != config.max_nodes)
    fail("--nnodes: static node ranks need a fixed node count (MIN == MAX)");
  if (config.heartbeat_interval.count() <= 0 || config.heartbeat_timeout <= config.heartbeat_interval)
    fail("--heartbeat-timeout must be longer than --heartbeat-interval, which must be positive");
  if (config.heartbeat_interval.count() < kMinHeartbeatIntervalMs ||
      config.heartbeat_interval.count() > kMaxHeartbeatIntervalMs || config.heartbeat_timeout.count() > kMaxHeartbeatMs)
    fail("--heartbeat-interval must be 0.01 s to 600 s and --heartbeat-timeout at most 3600 s (what an agent accepts "
         "from a rendezvous server)");
  if (config.join_timeout.count() <= 0) fail("--rdzv-timeout must be positive");
  if (config.join_grace.count() < 0) fail("--join-grace must not be negative");
  if (config.join_grace.count() > 0 && config.min_nodes != config.max_nodes)
    fail("--join-grace needs a fixed node count: an elastic job's places are filled by whoever comes");
  if (config.last_call.count() < 0) fail("the last call (--rdzv-conf last_call_timeout) must not be negative");
  if (config.max_departures < 1) fail("the departures a host is allowed before it is refused must be at least 1");
  if (config.join_min_interval.count() < 0) fail("join_min_interval must not be negative");
  if (config.join_policy == JoinPolicy::kAtFailure && config.join_min_interval.count() > 0)
    fail("join_min_interval applies to join_policy now: with at_failure a join never re-forms the job");
  if (!(config.stragglers.threshold >= 0 && config.stragglers.threshold <= 100) || config.stragglers.persist.count() <= 0)
    fail("straggler naming: the threshold must be 0 (off) to 10000%, the time a pace must last positive");
  if (config.max_restarts < 0 || config.max_restarts > kMaxRestarts)
    fail("--max-restarts must be in 0.." + std::to_string(kMaxRestarts));
  if (config.max_frame_bytes < kHandshakeMaxFrameBytes || config.max_outbox_bytes < config.max_frame_bytes + kFrameHeaderBytes)
    fail("the outbox bound must hold the largest frame, which must hold a hello");
}

std::chrono::milliseconds heartbeat_interval_for(const JobConfig& config) {
  const std::chrono::milliseconds by_rate{1000LL * config.max_nodes / kMaxHeartbeatsPerSecond};
  const std::chrono::milliseconds longest = config.heartbeat_timeout / 3;
  return std::max(config.heartbeat_interval, std::min(by_rate, longest));
}

std::chrono::milliseconds round_fence_margin(const JobConfig& config) {
  return 2 * heartbeat_interval_for(config) + timeouts::kFenceKillMargin;
}

std::chrono::milliseconds lapse_silence(const JobConfig& config) {
  return std::min(3 * heartbeat_interval_for(config), config.heartbeat_timeout / 2);
}

const char* to_string(JoinPolicy policy) {
  return policy == JoinPolicy::kAtFailure ? "at_failure" : "now";
}

bool parse_join_policy(std::string_view text, JoinPolicy& policy) {
  if (text == "now") policy = JoinPolicy::kNow;
  else if (text == "at_failure") policy = JoinPolicy::kAtFailure;
  else return false;
  return true;
}

std::size_t pending_connection_limit(const JobConfig& config) {
  if (config.max_pending_connections > 0) return config.max_pending_connections;
  // Large enough that strangers reconnecting as fast as they can take ~0.1 s to cycle through it (measured
  // ~10k connections/s on loopback), while a real agent's hello follows its connect within a round trip;
  // small enough that the strangers it holds cost ~10 MiB (each buffers at most one 4 KiB frame).
  return std::max<std::size_t>(1024, 64 + 4 * static_cast<std::size_t>(config.max_nodes));
}

}  // namespace ddprun::rendezvous
