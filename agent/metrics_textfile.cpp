#include "agent/metrics_textfile.hpp"

#include "common/background_thread.hpp"

#include "agent/atomic_file.hpp"
#include "agent/world.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

namespace ddprun::agent {
namespace {

// Prometheus label values: backslash, double quote and line feed escaped.
std::string escaped(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

struct Family {
  const char* name;
  const char* help;
};

constexpr Family kRankState{"ddprun_rank_state", "1 for the state each rank is in (starting, running, slow, stopping, hung, exited, failed)"};
constexpr Family kStep{"ddprun_rank_step", "the step of the rank's last heartbeat"};
constexpr Family kRate{"ddprun_rank_steps_per_second", "the rank's steps per second over the last minute"};
constexpr Family kBeatAge{"ddprun_rank_last_beat_age_seconds", "seconds since the rank's last heartbeat"};
constexpr Family kCpu{"ddprun_rank_cpu_percent", "CPU of the rank's process tree (100 = one core)"};
constexpr Family kRss{"ddprun_rank_rss_bytes", "resident memory of the rank's process tree"};
constexpr Family kWork{"ddprun_rank_work_seconds_per_step", "the rank's own work per step (where it says it), over the straggler window"};
constexpr Family kStraggler{"ddprun_rank_straggler", "1 while the rendezvous names the rank a straggler"};
constexpr Family kRestarts{"ddprun_job_restarts", "rounds after the first (restarts and re-forms) on this node"};
constexpr Family kRounds{"ddprun_job_rounds", "rounds this node has run, the current one included"};
constexpr Family kWorld{"ddprun_job_world_size", "workers of the job in this round"};
constexpr Family kTime{"ddprun_status_timestamp_seconds", "when this file was written (unix time)"};

void header(std::ostringstream& out, const Family& f) {
  out << "# HELP " << f.name << " " << f.help << "\n# TYPE " << f.name << " gauge\n";
}

}  // namespace

std::string metrics_run_id(const std::string& run_id, long pid) {
  return run_id == World{}.run_id ? run_id + "-" + std::to_string(pid) : run_id;
}

std::string textfile_name(const NodeStatus& s) {
  return "ddprun_" + s.run_id + "_node" + std::to_string(s.node_rank) + ".prom";
}

std::string prometheus_text(const NodeStatus& s) {
  const std::string node = "job=\"" + escaped(s.run_id) + "\",node=\"" + std::to_string(s.node_rank) +
                           "\",host=\"" + escaped(s.host) + "\"";
  auto rank_labels = [&](const RankStatus& r) { return node + ",rank=\"" + std::to_string(r.rank) + "\""; };
  std::ostringstream out;
  header(out, kRankState);
  for (const RankStatus& r : s.ranks)
    out << kRankState.name << "{" << rank_labels(r) << ",state=\"" << escaped(r.state) << "\"} 1\n";
  auto per_rank = [&](const Family& f, auto value) {
    header(out, f);
    for (const RankStatus& r : s.ranks)
      if (auto v = value(r)) out << f.name << "{" << rank_labels(r) << "} " << number(*v) << "\n";
  };
  auto as_double = [](const auto& opt) {
    return opt ? std::optional<double>(static_cast<double>(*opt)) : std::optional<double>();
  };
  per_rank(kStep, [&](const RankStatus& r) { return as_double(r.step); });
  per_rank(kRate, [&](const RankStatus& r) { return r.steps_per_s; });
  per_rank(kBeatAge, [&](const RankStatus& r) { return r.beat_age_s; });
  per_rank(kCpu, [&](const RankStatus& r) { return r.cpu_percent; });
  per_rank(kRss, [&](const RankStatus& r) { return as_double(r.rss_bytes); });
  per_rank(kWork, [&](const RankStatus& r) { return r.work_per_step_s; });
  per_rank(kStraggler, [&](const RankStatus& r) { return std::optional<double>(r.straggler ? 1 : 0); });
  auto per_node = [&](const Family& f, double value) {
    header(out, f);
    out << f.name << "{" << node << "} " << number(value) << "\n";
  };
  per_node(kRestarts, s.restart_count);
  per_node(kRounds, s.restart_count + 1);
  per_node(kWorld, s.world_size);
  per_node(kTime, static_cast<double>(s.time_ms) / 1000.0);
  return out.str();
}

namespace {

}  // namespace

struct TextfileWriter::Shared {
  std::string dir;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<std::pair<std::string, std::string>> pending;  // (name, text)
  std::string problem;   // a failing spell's first failure, not yet taken
  bool failing = false;
  bool stop = false;
  bool done = false;     // the thread removed the last file and ended

  void run() {
    std::string written;  // the name of the file last written, removed at the end
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [this] { return stop || pending; });
      if (stop) break;
      auto [name, text] = std::move(*pending);
      pending.reset();
      lock.unlock();
      if (!written.empty() && written != name) ::unlink((dir + "/" + written).c_str());
      const std::string why = write_file_atomically(dir, name, text, 0644);
      if (why.empty()) written = name;
      lock.lock();
      if (!why.empty() && !failing) problem = why;
      failing = !why.empty();
    }
    lock.unlock();
    if (!written.empty()) ::unlink((dir + "/" + written).c_str());  // the job's series go with it
    lock.lock();
    done = true;
    cv.notify_all();
  }
};

TextfileWriter::TextfileWriter(std::string dir) : shared_(std::make_shared<Shared>()) {
  shared_->dir = std::move(dir);
  start_background_thread("the metrics textfile's writer", [shared = shared_] { shared->run(); });
}

TextfileWriter::~TextfileWriter() {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
  shared_->cv.wait_for(lock, std::chrono::seconds(1), [this] { return shared_->done; });
}

void TextfileWriter::publish(std::string name, std::string text) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->pending.emplace(std::move(name), std::move(text));
  shared_->cv.notify_all();
}

std::string TextfileWriter::take_problem() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return std::exchange(shared_->problem, std::string());
}

}  // namespace ddprun::agent
