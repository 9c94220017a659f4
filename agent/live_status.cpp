#include "agent/live_status.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/process/process_tree.hpp"

namespace ddprun::agent {
using nlohmann::json;

namespace {

template <typename T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

struct ProcCpu {
  pid_t ppid = 0;
  double cpu_s = 0;  // utime + stime
};

// Fields 4 (ppid), 14 and 15 (utime, stime in clock ticks) of /proc/PID/stat; false when gone.
bool read_cpu(const std::string& pid_dir, ProcCpu& out) {
  const std::string stat = process::read_file("/proc/" + pid_dir + "/stat", 4096);
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  long long ppid = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 4) ppid = std::atoll(field.c_str());
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  out.ppid = static_cast<pid_t>(ppid);
  out.cpu_s = static_cast<double>(utime + stime) / ticks;
  return true;
}

// Resident pages (the second field of /proc/PID/statm) in bytes; 0 when gone.
std::int64_t rss_bytes(pid_t pid) {
  const std::string statm = process::read_file("/proc/" + std::to_string(pid) + "/statm", 256);
  long long size = 0, resident = 0;
  if (std::sscanf(statm.c_str(), "%lld %lld", &size, &resident) != 2) return 0;
  static const long long page = ::sysconf(_SC_PAGESIZE);
  return resident * page;
}

}  // namespace

void to_json(json& out, const RankStatus& r) {
  out = json{{"rank", r.rank},
             {"local_rank", r.local_rank},
             {"pid", r.pid},
             {"state", r.state},
             {"step", or_null(r.step)},
             {"steps_per_s", or_null(r.steps_per_s)},
             {"beat_age_s", or_null(r.beat_age_s)},
             {"cpu_percent", or_null(r.cpu_percent)},
             {"rss_bytes", or_null(r.rss_bytes)},
             {"work_per_step_s", or_null(r.work_per_step_s)},
             {"straggler", r.straggler}};
}

void to_json(json& out, const NodeStatus& n) {
  out = json{{"node_rank", n.node_rank},  {"host", n.host},
             {"state", n.state},          {"run_id", n.run_id},
             {"restart_count", n.restart_count}, {"max_restarts", n.max_restarts},
             {"world_size", n.world_size}, {"nnodes", n.nnodes},
             {"started_ms", n.started_ms}, {"time_ms", n.time_ms},
             {"ranks", n.ranks}};
}

void RateHistory::add(int rank, std::int64_t pid, std::int64_t time_ns, std::int64_t step, std::int64_t work_ns) {
  Series& s = samples_[rank];
  if (s.pid != pid) s = Series{pid, {}};  // a new round's worker: its steps are not the last one's
  s.samples.push_back(Sample{time_ns, step, work_ns});
  // Keep one sample at or before the kept span's start, so that a rate or pace spans its whole window.
  while (s.samples.size() > 2 && s.samples[1].time_ns <= time_ns - keep_ns_) s.samples.pop_front();
}

// The rank's newest sample and the newest at or before `window_ns` before it (or the oldest there is);
// nullopt with fewer than two samples.
std::optional<std::pair<RateHistory::Sample, RateHistory::Sample>> RateHistory::span(int rank,
                                                                                       std::int64_t window_ns) const {
  auto it = samples_.find(rank);
  if (it == samples_.end() || it->second.samples.size() < 2) return std::nullopt;
  const Sample& last = it->second.samples.back();
  const Sample* first = &it->second.samples.front();
  for (const Sample& s : it->second.samples)
    if (s.time_ns <= last.time_ns - window_ns) first = &s;
  return std::make_pair(*first, last);
}

std::optional<double> RateHistory::rate(int rank) const {
  const auto ends = span(rank, kRateWindowNs);
  if (!ends) return std::nullopt;
  const auto& [first, last] = *ends;
  if (last.time_ns <= first.time_ns || last.step < first.step) return std::nullopt;
  return static_cast<double>(last.step - first.step) * 1e9 / static_cast<double>(last.time_ns - first.time_ns);
}

std::optional<rendezvous::RankPace> RateHistory::pace(int rank, std::int64_t window_ns) const {
  const auto ends = span(rank, window_ns);
  if (!ends) return std::nullopt;
  const Sample* first = &ends->first;
  const Sample& last = ends->second;
  const std::int64_t steps = last.step - first->step;
  if (steps < kMinPaceSteps || last.time_ns <= first->time_ns) return std::nullopt;
  rendezvous::RankPace p;
  p.rank = rank;
  const std::int64_t elapsed = last.time_ns - first->time_ns;
  p.step_us = std::min(elapsed / steps / 1000, rendezvous::kMaxPaceUs);
  // The worker's own work cannot exceed the time that passed (issue 33: a wall-clock time written into the
  // counter went to the rendezvous as a pace past the protocol's bound, which closed this healthy node):
  // such a counter says nothing.
  const std::int64_t work = last.work_ns - first->work_ns;
  p.work_us = last.work_ns > 0 && work >= 0 && work <= elapsed ? work / steps / 1000 : -1;
  return p;
}

std::string straggler_text(const rendezvous::Straggler& s, double window_s) {
  char line[512];
  const double pace = static_cast<double>(s.pace_us) / 1e6, median = static_cast<double>(s.median_us) / 1e6;
  std::snprintf(line, sizeof line,
                "straggler: rank %d (node %d, host %s) took %.3f s%s per step over the last %.0f s, the other "
                "ranks' median %.3f s (+%.0f%%)",
                s.rank, s.node_rank, s.host.c_str(), pace, s.work ? " of its own work" : "", window_s, median,
                median > 0 ? (pace / median - 1) * 100 : 0.0);
  return line;
}

bool is_named(const std::vector<rendezvous::Straggler>& named, int rank) {
  return std::any_of(named.begin(), named.end(), [&](const rendezvous::Straggler& s) { return s.rank == rank; });
}

json straggler_json(const rendezvous::Straggler& s) {
  return json{{"rank", s.rank},
             {"node_rank", s.node_rank},
             {"host", s.host},
             {"per_step_s", static_cast<double>(s.pace_us) / 1e6},
             {"median_s", static_cast<double>(s.median_us) / 1e6},
             {"measure", s.work ? "work" : "step_time"}};
}

std::map<pid_t, TreeUsage> tree_usages(const std::vector<pid_t>& roots) {
  if (roots.empty()) return {};  // no worker yet (the live view's first sample, before the launch): no /proc scan
  std::map<pid_t, ProcCpu> procs;
  if (DIR* dir = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(dir)) {
      if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
      ProcCpu p;
      if (read_cpu(e->d_name, p)) procs.emplace(static_cast<pid_t>(std::atoll(e->d_name)), p);
    }
    ::closedir(dir);
  }
  std::map<pid_t, TreeUsage> out;
  const std::set<pid_t> wanted(roots.begin(), roots.end());
  std::map<pid_t, pid_t> root_of;  // memo: a process's root among `wanted`, 0 for none
  auto find_root = [&](pid_t pid) {
    std::vector<pid_t> path;
    pid_t at = pid, found = 0;
    for (int depth = 0; at > 1 && depth < 4096; ++depth) {
      if (auto m = root_of.find(at); m != root_of.end()) {
        found = m->second;
        break;
      }
      path.push_back(at);
      if (wanted.count(at)) {
        found = at;
        break;
      }
      auto p = procs.find(at);
      if (p == procs.end()) break;
      at = p->second.ppid;
    }
    for (pid_t q : path) root_of[q] = found;
    return found;
  };
  for (const auto& [pid, p] : procs) {
    const pid_t root = find_root(pid);
    if (root == 0) continue;
    TreeUsage& u = out[root];
    u.cpu_s += p.cpu_s;
    u.rss_bytes += rss_bytes(pid);
  }
  return out;
}

std::optional<double> cpu_percent(std::optional<double> before_s, std::optional<double> now_s, double dt_s) {
  if (!before_s || !now_s || dt_s <= 0 || *now_s < *before_s) return std::nullopt;
  return (*now_s - *before_s) * 100.0 / dt_s;
}

}  // namespace ddprun::agent
