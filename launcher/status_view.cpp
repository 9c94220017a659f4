#include "launcher/status_view.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace ddprun::launcher {
using nlohmann::json;

namespace {

std::string fixed(const json& v, int decimals) {
  if (!v.is_number()) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v.get<double>());
  return buf;
}

std::string integer(const json& v) { return v.is_number_integer() ? std::to_string(v.get<std::int64_t>()) : ""; }

std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : ""; }

// Columns padded to their widest cell; the last column is not padded.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::ostringstream out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  return out.str();
}

}  // namespace

std::string human_bytes(const json& bytes) {
  if (!bytes.is_number()) return "";
  double v = bytes.get<double>();
  const char* units[] = {"B", "K", "M", "G", "T"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : (v < 10 ? "%.1f%s" : "%.0f%s"), v, units[u]);
  return buf;
}

std::string human_age(std::int64_t ms) {
  std::int64_t s = std::max<std::int64_t>(0, ms / 1000);
  char buf[48];
  if (s >= 86400)
    std::snprintf(buf, sizeof buf, "%lldd %02lld:%02lld:%02lld", static_cast<long long>(s / 86400),
                  static_cast<long long>(s / 3600 % 24), static_cast<long long>(s / 60 % 60),
                  static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  return buf;
}

std::string render_job(const json& job, std::int64_t now_ms) {
  const json& nodes = job.at("nodes");
  if (!nodes.is_array() || nodes.empty()) return "(no status)\n";
  const json& here = nodes.front();  // the node asked: its numbers are the job's as this node knows them
  std::ostringstream out;
  out << "run " << text(here.value("run_id", json())) << "  round " << integer(here.value("restart_count", json()))
      << " (max restarts " << integer(here.value("max_restarts", json())) << ")  world "
      << integer(here.value("world_size", json())) << " on " << integer(here.value("nnodes", json())) << " node"
      << (here.value("nnodes", 1) == 1 ? "" : "s") << "  age "
      << human_age(now_ms - here.value("started_ms", now_ms)) << "\n";
  std::vector<std::vector<std::string>> node_rows{{"NODE", "HOST", "AGENT", "RANKS", "AS OF"}};
  std::vector<std::vector<std::string>> rank_rows{
      {"RANK", "NODE", "HOST", "PID", "STATE", "STEP", "STEPS/S", "WORK/STEP", "LAST BEAT", "CPU%", "RSS"}};
  std::vector<const json*> sorted;
  for (const json& n : nodes) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(),
            [](const json* a, const json* b) { return a->value("node_rank", 0) < b->value("node_rank", 0); });
  for (const json* n : sorted) {
    const json& ranks = n->value("ranks", json::array());
    const std::string node = integer(n->value("node_rank", json()));
    const std::string host = text(n->value("host", json()));
    node_rows.push_back({node, host, text(n->value("state", json())), std::to_string(ranks.size()),
                         fixed(json(n->value("age_ms", 0) / 1000.0), 1) + "s ago"});
    for (const json& r : ranks) {
      const std::string beat = fixed(r.value("beat_age_s", json()), 1);
      const std::string work = fixed(r.value("work_per_step_s", json()), 3);
      // A named straggler is running, slowly: the one word that makes it stand out in the column.
      // The agent's word (an older agent said "running" and the flag: shown as "slow" too).
      std::string state = text(r.value("state", json()));
      if (state == "running" && r.value("straggler", false)) state = "slow";
      rank_rows.push_back({integer(r.value("rank", json())), node, host, integer(r.value("pid", json())), state,
                           integer(r.value("step", json())), fixed(r.value("steps_per_s", json()), 2),
                           work.empty() ? "" : work + "s", beat.empty() ? "" : beat + "s",
                           fixed(r.value("cpu_percent", json()), 0), human_bytes(r.value("rss_bytes", json()))});
    }
  }
  std::sort(rank_rows.begin() + 1, rank_rows.end(), [](const auto& a, const auto& b) {
    return std::stoll(a[0].empty() ? "0" : a[0]) < std::stoll(b[0].empty() ? "0" : b[0]);
  });
  out << table(node_rows) << table(rank_rows);
  for (const json& st : job.value("stragglers", json::array())) {
    const double pace = st.value("per_step_s", 0.0), median = st.value("median_s", 0.0);
    char line[256];
    std::snprintf(line, sizeof line, "straggler: rank %d (node %d, host %s): %.3f s%s per step, the other ranks' "
                  "median %.3f s (+%.0f%%)\n", st.value("rank", 0), st.value("node_rank", 0),
                  st.value("host", std::string()).c_str(), pace,
                  st.value("measure", std::string()) == "work" ? " of its own work" : "", median,
                  median > 0 ? (pace / median - 1) * 100 : 0.0);
    out << line;
  }
  if (!job.value("complete", true)) out << "(not every node of the job is shown: the rendezvous did not answer, or has not heard from it yet)\n";
  return out.str();
}

}  // namespace ddprun::launcher
