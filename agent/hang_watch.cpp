#include "agent/hang_watch.hpp"

#include <algorithm>
#include <cstdio>

#include "agent/exit_summary.hpp"

namespace ddprun::agent {

std::int64_t discovery_period_ns(std::int64_t timeout_ns) {
  return std::clamp<std::int64_t>(timeout_ns / 4, 10'000'000, 1'000'000'000);
}

HangCheck check_hangs(const std::vector<WatchedWorker>& running, std::int64_t timeout_ns, std::int64_t now_ns,
                      std::int64_t initial_timeout_ns) {
  HangCheck out;
  auto consider = [&](std::int64_t at) {
    out.next_check_ns = out.next_check_ns ? std::min(*out.next_check_ns, at) : at;
  };
  for (const WatchedWorker& w : running) {
    if (!w.beat.ever()) {
      if (initial_timeout_ns > 0) {
        const std::int64_t deadline = w.started_ns + initial_timeout_ns;
        if (deadline <= now_ns) {
          out.hung.push_back(w.local_rank);
          continue;
        }
        consider(deadline);
      }
      consider(now_ns + discovery_period_ns(timeout_ns));
      continue;
    }
    const std::int64_t last = std::min(w.beat.time_ns, now_ns);
    const std::int64_t deadline = std::max(last + timeout_ns, w.beat.quiet_until_ns);
    if (deadline <= now_ns) out.hung.push_back(w.local_rank);
    else consider(deadline);
  }
  return out;
}

}  // namespace ddprun::agent
