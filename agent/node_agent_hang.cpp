// Hang detection on the agent's loop (--hang-timeout): one timer reads every worker's heartbeat slot
// (agent/heartbeat_channel.hpp) and asks agent/hang_watch.hpp who is hung; the hung workers' stacks are
// captured (agent/stack_capture.hpp), then they are killed and the job is torn down like after a failure,
// on every node, with "hung" as the root cause (or restarted, as --max-restarts allows).
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <nlohmann/json.hpp>

#include "agent/env_contract.hpp"
#include "agent/hang_watch.hpp"
#include "agent/node_agent_impl.hpp"
#include "common/process/process_tree.hpp"
#include "common/stall_clock.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
using nlohmann::json;

void NodeAgent::arm_hang_watch() {
  if (!heartbeats_.enabled()) return;
  std::vector<WatchedWorker> running;
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0) {
      Beat beat = heartbeats_.read(w.local_rank);
      if (beat.ever()) beat.time_ns = std::max(beat.time_ns, hang_pause_end_ns_);
      running.push_back({w.local_rank, beat, std::max(round_started_ns_, hang_pause_end_ns_)});
    }
  const std::int64_t now = monotonic_ns();
  const HangCheck check = check_hangs(running, config_.hang_timeout.count() * 1'000'000, now,
                                      config_.hang_initial_timeout.count() * 1'000'000);
  if (!check.hung.empty()) return on_hung(check.hung, now);
  if (!check.next_check_ns) return;
  // steady_clock is CLOCK_MONOTONIC, the clock the workers write.
  hang_timer_.expires_at(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(*check.next_check_ns)));
  hang_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !hang_watch_applies()) return;
    // Late by more than a loaded loop ever is: this process did not run, and the workers may not have
    // either (a frozen machine); each gets a full timeout from now before it is judged.
    if (std::chrono::steady_clock::now() - hang_timer_.expiry() > StallClock::kStallThreshold)
      hang_pause_end_ns_ = monotonic_ns();
    arm_hang_watch();
  });
}

// Workers are being judged: the round runs, nothing stopped it, no capture is under way.
bool NodeAgent::hang_watch_applies() const {
  return lifecycle_.workers_started() && policy_.phase() == Phase::kRunning && !capture_.active();
}

// fg after Ctrl-Z: the workers were stopped too, so their last beats are as old as the pause.
void NodeAgent::restart_hang_watch_after_pause() {
  hang_pause_end_ns_ = monotonic_ns();
  if (!heartbeats_.enabled() || !hang_watch_applies()) return;
  hang_timer_.cancel();
  arm_hang_watch();
}

void NodeAgent::on_hung(std::vector<int> hung, std::int64_t now_ns) {
  // The one silent longest stopped first: it is the root cause when several hang together (one that never
  // beat counts from the round's start).
  auto silent_since = [&](int lr) {
    const Beat b = heartbeats_.read(lr);
    return b.ever() ? b.time_ns : std::max(round_started_ns_, hang_pause_end_ns_);
  };
  std::sort(hung.begin(), hung.end(), [&](int a, int b) { return silent_since(a) < silent_since(b); });
  const std::int64_t now_ms = unix_ms();
  hung_.clear();
  std::vector<CaptureTarget> targets;
  for (int lr : hung) {
    const Beat beat = heartbeats_.read(lr);
    const WorkerRecord& w = policy_.worker(lr);
    HungWorker h;
    h.local_rank = lr;
    h.step = beat.step;
    h.never_beat = !beat.ever();
    h.silent_ms = std::max<std::int64_t>(0, (now_ns - silent_since(lr)) / 1'000'000);
    h.last_beat_ms = now_ms - h.silent_ms;
    hung_.push_back(h);
    if (h.never_beat)
      log_.warning("rank ", w.rank, " (pid ", w.pid, ") hung: no first heartbeat ", h.silent_ms,
                   " ms after its start; capturing its stacks");
    else
      log_.warning("rank ", w.rank, " (pid ", w.pid, ") hung: no heartbeat for ", h.silent_ms, " ms",
                   h.step >= 0 ? " after step " + std::to_string(h.step) : std::string(), "; capturing its stacks");
    events_.write(json{{"event", "hung"}, {"time_ms", now_ms}, {"rank", w.rank}, {"local_rank", lr},
                       {"pid", w.pid}, {"node_rank", world_.node_rank}, {"last_step", h.step},
                       {"last_beat_ms", h.never_beat ? json(nullptr) : json(h.last_beat_ms)},
                       {"never_beat", h.never_beat}});
    targets.push_back({w.rank, lr, w.pid, stacks_file(lr)});
  }
  hang_stacks_path_ = hang_stacks_file();
  layout_.keep(hang_stacks_path_);
  capture_.start(std::move(targets), hang_stacks_path_, env_value(config_.base_env, "PATH", "/usr/bin:/bin"),
                 config_.stack_capture_limit, [this] { on_stacks_captured(); });
}

void NodeAgent::on_stacks_captured() {
  log_.warning("stacks of the hung worker(s) in ", layout_.published(hang_stacks_path_));
  events_.write(json{{"event", "stacks"}, {"time_ms", unix_ms()}, {"file", layout_.published(hang_stacks_path_)}});
  if (policy_.phase() != Phase::kRunning) return;  // stopped meanwhile: the teardown took them
  Decision d;
  for (const HungWorker& h : hung_) {
    const Decision one = policy_.on_hung(h.local_rank, unix_ms());
    if (one.teardown_began) d = one;
    // SIGKILL: a hung process may never act on SIGTERM, and it has had its chance (a stopped one too).
    process::signal_group(policy_.worker(h.local_rank).pid, SIGKILL);
  }
  apply(d, "hung");
  if (d.teardown_began && !hung_.empty()) report_hang(hung_.front());
}

void NodeAgent::report_hang(const HungWorker& h) {
  rendezvous::Failure f = failure_of(policy_.worker(h.local_rank));
  f.signal = SIGKILL;
  f.time_unix_ms = unix_ms();
  f.message = hang_message(h.silent_ms, h.step, h.last_beat_ms, layout_.published(hang_stacks_path_), h.never_beat);
  link_.client().report_failure(f);
}

// Always inside the private work tree (mkdtemp's 0700, on a local file system: agent/run_layout.hpp):
// never a predictable name in a shared directory such as /dev/shm, where another user could plant a
// symlink or a FIFO, and never on a --log-dir that may hang the loop. Without --log-dir the temporary
// tree is removed at the end except for this file (RunLayout::keep); with it, the file is copied there.
std::string NodeAgent::hang_stacks_file() const {
  return layout_.attempt_work_file(world_.restart_count, "hang_stacks.txt");
}

std::string NodeAgent::stacks_file(int local_rank) const {
  return layout_.work_dir(world_.restart_count, local_rank) + "/python_stacks.txt";
}

}  // namespace ddprun::agent
