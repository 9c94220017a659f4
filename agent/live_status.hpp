// The live view of a running job (ddprun-status, README "Watching a job"): per rank its state, step, step rate
// over the last minute, time since its last beat, CPU and memory; per node its agent's state.
//
// Everything here is what the agent already knows: its workers' records, the heartbeat slots it reads anyway
// for hang detection, and /proc. Nothing asks a worker anything. The agent samples every kStatusPeriod
// (agent/live_view.cpp); a rank's rate is the steps between the oldest sample of the last minute and now.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/timeouts.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::agent {

inline constexpr std::chrono::milliseconds kStatusPeriod = timeouts::kStatusPeriod;
inline constexpr std::int64_t kRateWindowNs = 60'000'000'000;

// One worker as the view shows it. Absent values (no beats, no /proc) are null in JSON, blank in the table.
struct RankStatus {
  int rank = 0;
  int local_rank = 0;
  std::int64_t pid = 0;
  std::string state;                        // starting, running, stopping, hung, exited, failed
  std::optional<std::int64_t> step;         // the last beat's step
  std::optional<double> steps_per_s;        // over the last minute (or since its first beat, if younger)
  std::optional<double> beat_age_s;         // since its last beat
  std::optional<double> cpu_percent;        // the worker and its descendants, over the last sample period
  std::optional<std::int64_t> rss_bytes;    // the worker and its descendants
  std::optional<double> work_per_step_s;    // its own work per step over the straggler window, where it says it
  bool straggler = false;                   // named by the rendezvous (rendezvous/straggler_watch.hpp)
};

struct NodeStatus {
  int node_rank = 0;
  std::string host;
  std::string state;  // the agent's: rendezvous, running, restarting, stopping, done
  std::string run_id;
  int restart_count = 0;
  int max_restarts = 0;
  int world_size = 0;
  int nnodes = 0;
  std::int64_t started_ms = 0;  // the agent's start (unix ms): the job's age on this node
  std::int64_t time_ms = 0;     // when this status was taken (unix ms)
  std::vector<RankStatus> ranks;
};

void to_json(nlohmann::json& out, const RankStatus& r);
void to_json(nlohmann::json& out, const NodeStatus& n);

// Step samples per rank for the rate over the last minute and the pace over the straggler window. A new
// round (new pids) starts afresh.
class RateHistory {
 public:
  // Keeps samples for the longer of a minute and `window_ns` (the straggler window).
  explicit RateHistory(std::int64_t window_ns = 0) : keep_ns_(std::max(kRateWindowNs, window_ns)) {}
  // work_ns: the slot's work so far (0: the worker does not say it).
  void add(int rank, std::int64_t pid, std::int64_t time_ns, std::int64_t step, std::int64_t work_ns = 0);
  std::optional<double> rate(int rank) const;
  // Step time and work per step (µs) over the last `window_ns` (over what there is, when the rank is younger),
  // once the rank made kMinPaceSteps steps in it; work_us -1 where the worker does not say its work.
  std::optional<rendezvous::RankPace> pace(int rank, std::int64_t window_ns) const;
  void clear() { samples_.clear(); }
  static constexpr std::int64_t kMinPaceSteps = 3;

 private:
  struct Sample {
    std::int64_t time_ns;
    std::int64_t step;
    std::int64_t work_ns;
  };
  std::optional<std::pair<Sample, Sample>> span(int rank, std::int64_t window_ns) const;
  struct Series {
    std::int64_t pid = 0;
    std::deque<Sample> samples;
  };
  std::int64_t keep_ns_;
  std::map<int, Series> samples_;
};

// The log line that names a straggler: its rank, node, pace and the others' median, over the window.
std::string straggler_text(const rendezvous::Straggler& s, double window_s);
// Whether `rank` is among `named`.
bool is_named(const std::vector<rendezvous::Straggler>& named, int rank);
// A straggler as the events file and ddprun-status --json give it: rank, node_rank, host, per_step_s, median_s,
// measure (work or step_time).
nlohmann::json straggler_json(const rendezvous::Straggler& s);

// CPU time (seconds) and resident memory of each root process and all its descendants, from one pass over
// /proc (one read of each process's stat, one of statm for those in a tree); a root that is gone is absent.
struct TreeUsage {
  double cpu_s = 0;
  std::int64_t rss_bytes = 0;
};
std::map<pid_t, TreeUsage> tree_usages(const std::vector<pid_t>& roots);

// The CPU percentage between two readings of a tree's CPU time `dt_s` apart (100 = one core).
std::optional<double> cpu_percent(std::optional<double> before_s, std::optional<double> now_s, double dt_s);

}  // namespace ddprun::agent
