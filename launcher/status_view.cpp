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

// Bidirectional controls and zero-width characters: invisible, they reorder or hide what is printed around them
// (issue 55: "evil" shown as "live" by a right-to-left override). Their UTF-8 lengths, 0 for anything else.
std::size_t invisible_at(const std::string& s, std::size_t i) {
  const auto at = [&s](std::size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; };
  const unsigned char a = at(i), b = at(i + 1), c = at(i + 2);
  if (a == 0xd8 && b == 0x9c) return 2;                                     // U+061C arabic letter mark
  if (a == 0xe2 && b == 0x80 && ((c >= 0x8b && c <= 0x8f) || (c >= 0xaa && c <= 0xae))) return 3;  // ZW*, LRM..RLO
  if (a == 0xe2 && b == 0x81 && c >= 0xa0 && c <= 0xaf) return 3;          // word joiner, isolates U+2066..2069
  if (a == 0xef && b == 0xbb && c == 0xbf) return 3;                        // U+FEFF zero-width no-break space
  return 0;
}

// Another node's strings reach this terminal (issue 33: an insider's status with escape sequences rewrote the
// user's title, cleared the screen and forged a line): every control character, C0, DEL and UTF-8's C1, is shown
// as \xNN instead of acting on the terminal, as --json escapes them; so is every bidirectional control and
// zero-width character (issue 55), byte by byte.
std::string text(const json& v) {
  if (!v.is_string()) return "";
  const std::string& raw = v.get_ref<const std::string&>();
  std::string out;
  out.reserve(raw.size());
  auto hex = [&](unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  };
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const auto c = static_cast<unsigned char>(raw[i]);
    const auto next = i + 1 < raw.size() ? static_cast<unsigned char>(raw[i + 1]) : 0;
    if (const std::size_t n = invisible_at(raw, i); n > 0) {
      for (std::size_t k = 0; k < n; ++k) hex(static_cast<unsigned char>(raw[i + k]));
      i += n - 1;
    } else if (c < 0x20 || c == 0x7f) {
      hex(c);
    } else if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {  // U+0080..U+009F: CSI and the other C1 controls
      hex(c);
      hex(next);
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// A number another node sent, or `fallback` when it is not one (its status is not trusted to be well formed).
std::int64_t whole(const json& object, const char* key, std::int64_t fallback = 0) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<std::int64_t>() : fallback;
}
double real(const json& object, const char* key, double fallback = 0) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : fallback;
}

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
  if (!here.is_object()) return "(no status)\n";
  std::ostringstream out;
  out << "run " << text(here.value("run_id", json())) << "  round " << integer(here.value("restart_count", json()))
      << " (max restarts " << integer(here.value("max_restarts", json())) << ")  world "
      << integer(here.value("world_size", json())) << " on " << integer(here.value("nnodes", json())) << " node"
      << (whole(here, "nnodes", 1) == 1 ? "" : "s") << "  age "
      << human_age(now_ms - whole(here, "started_ms", now_ms)) << "\n";
  std::vector<std::vector<std::string>> node_rows{{"NODE", "HOST", "AGENT", "RANKS", "AS OF"}};
  std::vector<std::vector<std::string>> rank_rows{
      {"RANK", "NODE", "HOST", "PID", "STATE", "STEP", "STEPS/S", "WORK/STEP", "LAST BEAT", "CPU%", "RSS"}};
  std::vector<const json*> sorted;
  for (const json& n : nodes)
    if (n.is_object()) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(),
            [](const json* a, const json* b) { return whole(*a, "node_rank") < whole(*b, "node_rank"); });
  for (const json* n : sorted) {
    const json ranks = n->contains("ranks") && n->at("ranks").is_array() ? n->at("ranks") : json::array();
    const std::string node = integer(n->value("node_rank", json()));
    const std::string host = text(n->value("host", json()));
    node_rows.push_back({node, host, text(n->value("state", json())), std::to_string(ranks.size()),
                         fixed(json(real(*n, "age_ms") / 1000.0), 1) + "s ago"});
    for (const json& r : ranks) {
      if (!r.is_object()) continue;
      const std::string beat = fixed(r.value("beat_age_s", json()), 1);
      const std::string work = fixed(r.value("work_per_step_s", json()), 3);
      // A named straggler is running, slowly: the one word that makes it stand out in the column.
      // The agent's word (an older agent said "running" and the flag: shown as "slow" too).
      std::string state = text(r.value("state", json()));
      const auto flag = r.find("straggler");
      if (state == "running" && flag != r.end() && flag->is_boolean() && flag->get<bool>()) state = "slow";
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
  const json stragglers = job.contains("stragglers") && job.at("stragglers").is_array() ? job.at("stragglers")
                                                                                         : json::array();
  for (const json& st : stragglers) {
    if (!st.is_object()) continue;
    const double pace = real(st, "per_step_s"), median = real(st, "median_s");
    char line[160];
    std::snprintf(line, sizeof line, "): %.3f s%s per step, the other ranks' median %.3f s (+%.0f%%)\n", pace,
                  text(st.value("measure", json())) == "work" ? " of its own work" : "", median,
                  median > 0 ? (pace / median - 1) * 100 : 0.0);
    out << "straggler: rank " << whole(st, "rank") << " (node " << whole(st, "node_rank") << ", host "
        << text(st.value("host", json())) << line;
  }
  const auto complete = job.find("complete");
  if (complete != job.end() && complete->is_boolean() && !complete->get<bool>()) out << "(not every node of the job is shown: the rendezvous did not answer, or has not heard from it yet)\n";
  return out.str();
}

}  // namespace ddprun::launcher
