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

std::string torch_collective_in(const std::string& python_stacks) {
  // faulthandler's frame lines: '  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py",
  // line 1536 in all_reduce'. The first such line is the innermost call of its thread.
  static const std::string kFile = "distributed_c10d.py\", line ";
  for (std::size_t at = python_stacks.find(kFile); at != std::string::npos; at = python_stacks.find(kFile, at + 1)) {
    const std::size_t in = python_stacks.find(" in ", at);
    const std::size_t eol = python_stacks.find('\n', at);
    if (in == std::string::npos || (eol != std::string::npos && in > eol)) continue;
    std::string name = python_stacks.substr(in + 4, (eol == std::string::npos ? python_stacks.size() : eol) - in - 4);
    while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
    if (!name.empty() && name.size() <= 64 && name.find_first_of(" \t\"") == std::string::npos) return name;
  }
  return {};
}

}  // namespace ddprun::agent
