// The live view (agent/live_status.hpp): every kStatusPeriod the agent samples its workers (the heartbeat slots
// it reads anyway, /proc), tells the rendezvous (multi-node jobs), and answers ddprun-status on its private
// Unix socket (agent/status_socket.hpp): this node fresh, the others as the rendezvous last heard them.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "agent/node_agent_impl.hpp"
#include "common/process/process_tree.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
using nlohmann::json;

namespace {
// How long a request waits for the rendezvous' view of the other nodes before it is answered with this one.
constexpr std::chrono::milliseconds kViewWait{2000};

// DDPRUN_STATUS_PERIOD_MS (tests, benchmarks): another sampling period; 0 samples only when asked.
std::chrono::milliseconds status_period() {
  const char* text = std::getenv("DDPRUN_STATUS_PERIOD_MS");
  if (text == nullptr || *text == '\0') return kStatusPeriod;
  return std::chrono::milliseconds(std::max(0L, std::atol(text)));
}
}  // namespace

void NodeAgent::start_status() {
  status_rates_ = RateHistory(std::chrono::nanoseconds(config_.straggler_window).count());
  status_socket_ = std::make_unique<StatusSocket>(io_, [this](StatusSocket::Reply reply) { answer_status(std::move(reply)); });
  std::string problem;
  if (!status_socket_->open(world_.run_id, problem)) log_.warning("no live view for ddprun-status: ", problem);
  else log_.debug("live view: ", status_socket_->path());
  on_status_tick();
}

void NodeAgent::stop_status() {
  status_timer_.cancel();
  view_timer_.cancel();
  if (status_socket_) status_socket_->close();
  answer_pending_views(nullptr);
  // The job is over here: its series leave the collector with it, instead of standing still as if it ran on.
  textfile_.reset();
}

void NodeAgent::on_status_tick() {
  if (lifecycle_.finished()) return;
  const NodeStatus status = sample_status(/*remember=*/true);
  if (lifecycle_.placed_once()) {
    // One node too: its own server judges its ranks' paces. A status beyond the protocol's bound would be a
    // protocol error at the server (this node lost): not sent.
    std::string text = json(status).dump();
    if (text.size() * 2 <= rendezvous::kMaxNodeStatusBytes) link_.client().report_status(std::move(text), running_paces());
  }
  if (!config_.metrics_textfile_dir.empty()) write_metrics_textfile(status);
  const auto period = status_period();
  if (period.count() == 0) return;
  status_timer_.expires_after(std::max(period, std::chrono::milliseconds(50)));
  status_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_status_tick();
  });
}

void NodeAgent::write_metrics_textfile(const NodeStatus& status) {
  if (!textfile_) textfile_ = std::make_unique<TextfileWriter>(config_.metrics_textfile_dir);
  // The writer's failure, if any, is from an earlier period: said once per failing spell.
  if (const std::string problem = textfile_->take_problem(); !problem.empty())
    log_.warning("--metrics-textfile: ", problem, " (the job goes on; tried again every period)");
  textfile_->publish(textfile_name(status), prometheus_text(status));
}

std::string NodeAgent::agent_state() const {
  switch (lifecycle_.stage()) {
    case AgentLifecycle::Stage::kAwaitingRound: return lifecycle_.placed_once() ? "restarting" : "rendezvous";
    case AgentLifecycle::Stage::kRunning:
      return policy_.phase() == Phase::kRunning ? "running" : "stopping";
    case AgentLifecycle::Stage::kReforming:  // the workers live on into the next round
      return policy_.phase() == Phase::kRunning ? "restarting" : "stopping";
    case AgentLifecycle::Stage::kRoundOver: return lifecycle_.restarting() ? "restarting" : "stopping";
    case AgentLifecycle::Stage::kNothingRan:
    case AgentLifecycle::Stage::kFinished: return "done";
  }
  return "?";
}

NodeStatus NodeAgent::sample_status(bool remember) {
  NodeStatus s;
  s.node_rank = world_.node_rank;
  s.host = config_.host;
  s.state = agent_state();
  s.run_id = world_.run_id;
  s.restart_count = world_.restart_count;
  s.max_restarts = world_.max_restarts;
  s.world_size = world_.world_size;
  s.nnodes = world_.nnodes;
  s.started_ms = start_ms_;
  s.time_ms = unix_ms();
  const std::int64_t now_ns = monotonic_ns();
  const std::int64_t window_ns = std::chrono::nanoseconds(config_.straggler_window).count();
  std::vector<pid_t> pids;
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0) pids.push_back(w.pid);
  const std::map<pid_t, TreeUsage> usage = tree_usages(pids);
  const double dt_s = static_cast<double>(now_ns - status_sampled_ns_) / 1e9;
  std::map<pid_t, double> cpu_now;
  for (const WorkerRecord& w : policy_.workers()) {
    RankStatus r;
    r.rank = w.rank;
    r.local_rank = w.local_rank;
    r.pid = w.pid;
    const bool running = w.state == WorkerState::kRunning;
    if (heartbeats_.enabled() && w.local_rank < heartbeats_.slots()) {
      const Beat beat = heartbeats_.read(w.local_rank);
      if (beat.foreign_clock && running && heartbeats_.take_foreign_clock_notice(w.local_rank))
        log_.warning("rank ", w.rank, " (pid ", w.pid, ") beats with a time from another clock than CLOCK_MONOTONIC "
                     "(Python's time.monotonic_ns(), C++'s std::chrono::steady_clock): its beats are ignored, so "
                     "--hang-timeout and the live view see none");
      if (beat.ever() && running) {
        if (beat.step >= 0) r.step = beat.step;
        // A beat written after now_ns was read is 0 s old, not -0.001 s.
        r.beat_age_s = static_cast<double>(std::max<std::int64_t>(0, now_ns - beat.time_ns)) / 1e9;
        if (beat.step >= 0 && remember) status_rates_.add(w.rank, w.pid, now_ns, beat.step, beat.work_ns);
      }
      if (running) r.steps_per_s = status_rates_.rate(w.rank);
      if (auto pace = status_rates_.pace(w.rank, window_ns); running && pace && pace->work_us >= 0)
        r.work_per_step_s = static_cast<double>(pace->work_us) / 1e6;
    }
    r.straggler = running && is_named(stragglers_, w.rank);
    if (auto u = usage.find(w.pid); running && u != usage.end()) {
      r.rss_bytes = u->second.rss_bytes;
      cpu_now[w.pid] = u->second.cpu_s;
      auto before = status_cpu_.find(w.pid);
      r.cpu_percent = cpu_percent(before == status_cpu_.end() ? std::nullopt : std::optional<double>(before->second),
                                  u->second.cpu_s, dt_s);
    }
    if (!running) r.state = w.state == WorkerState::kSucceeded ? "exited" : w.hung ? "hung" : "failed";
    else if (policy_.phase() != Phase::kRunning) r.state = "stopping";
    else if (hang_.found_hung(w.local_rank)) r.state = "hung";
    // Under --hang-timeout the workers beat (the user said so): until the first beat a rank is starting. A
    // program that never beats is running from its start.
    else if (config_.hang_timeout.count() > 0 && !r.beat_age_s) r.state = "starting";
    // One word for the table, --json and the textfile alike (the table used to make "slow" of the flag).
    else r.state = r.straggler ? "slow" : "running";
    s.ranks.push_back(std::move(r));
  }
  if (remember) {
    status_cpu_ = std::move(cpu_now);
    status_sampled_ns_ = now_ns;
  }
  return s;
}

// Each running rank's pace over the straggler window, for the rendezvous' judgement (straggler_watch.hpp): only
// ranks that are running now, in a round that is running (a stopping round's paces describe no one).
std::vector<rendezvous::RankPace> NodeAgent::running_paces() const {
  std::vector<rendezvous::RankPace> paces;
  if (policy_.phase() != Phase::kRunning) return paces;
  const std::int64_t window_ns = std::chrono::nanoseconds(config_.straggler_window).count();
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning)
      if (auto pace = status_rates_.pace(w.rank, window_ns)) paces.push_back(*pace);
  return paces;
}

// The rendezvous named (or stopped naming) stragglers: said once each way, on every node, in the log and the
// events file; the live view marks them.
void NodeAgent::on_stragglers(const rendezvous::StragglersMsg& message) {
  const double window_s = std::chrono::duration<double>(config_.straggler_window).count();
  for (const rendezvous::Straggler& s : message.named) {
    if (is_named(stragglers_, s.rank)) continue;
    log_.warning(straggler_text(s, window_s));
    json event = straggler_json(s);
    event.update(json{{"event", "straggler"}, {"time_ms", unix_ms()}, {"window_s", window_s}});
    events_.write(event);
    if (config_.straggler_stop && s.node_rank == world_.node_rank) stop_straggler(s, window_s);
  }
  for (const rendezvous::Straggler& s : stragglers_) {
    if (is_named(message.named, s.rank)) continue;
    log_.info("rank ", s.rank, " is no longer a straggler");
    events_.write(json{{"event", "straggler_end"}, {"time_ms", unix_ms()}, {"rank", s.rank}, {"node_rank", s.node_rank}});
  }
  stragglers_ = message.named;
}

// --straggler-action stop: the rank is killed as a failure of its own, its reason the straggler line, so that
// every node's summary says why; the job ends, or restarts under --max-restarts. SIGKILL, not SIGTERM: a worker
// that takes SIGTERM as a stop request would exit 0, a success, and leave the others waiting for it.
void NodeAgent::stop_straggler(const rendezvous::Straggler& s, double window_s) {
  const int lr = s.rank - world_.rank_offset;
  if (policy_.phase() != Phase::kRunning || lr < 0 || lr >= world_.local_world_size) return;
  WorkerRecord& w = policy_.worker(lr);
  if (w.state != WorkerState::kRunning || w.pid <= 0) return;
  w.reason = "stopped by --straggler-action stop: " + straggler_text(s, window_s);
  log_.warning("rank ", w.rank, " (pid ", w.pid, ") is stopped as a straggler (--straggler-action stop)");
  process::signal_group(w.pid, SIGKILL);
}

void NodeAgent::answer_status(StatusSocket::Reply reply) {
  pending_views_.push_back(std::move(reply));
  if (pending_views_.size() > 1) return;  // a request to the rendezvous is already out
  if (world_.nnodes <= 1 || !lifecycle_.placed_once() || lifecycle_.finished()) return answer_pending_views(nullptr);
  link_.client().request_view();
  view_timer_.expires_after(kViewWait);
  view_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) answer_pending_views(nullptr);
  });
}

void NodeAgent::on_job_view(const rendezvous::JobViewMsg& view) {
  view_timer_.cancel();
  answer_pending_views(&view);
}

// {"nodes": [...]}: this node sampled now (age 0), then every other node as the rendezvous last heard it.
void NodeAgent::answer_pending_views(const rendezvous::JobViewMsg* view) {
  if (pending_views_.empty()) return;
  json nodes = json::array();
  json here = sample_status(/*remember=*/false);
  here["age_ms"] = 0;
  nodes.push_back(here);
  if (view != nullptr) {
    for (std::size_t i = 0; i < view->nodes.size(); ++i) {
      json other = json::parse(view->nodes[i], nullptr, /*allow_exceptions=*/false);
      if (!other.is_object() || other.value("node_rank", -1) == world_.node_rank) continue;
      other["age_ms"] = view->ages_ms[i];
      nodes.push_back(std::move(other));
    }
  }
  const bool complete = nodes.size() >= static_cast<std::size_t>(std::max(world_.nnodes, 1));
  json stragglers = json::array();
  for (const rendezvous::Straggler& s : stragglers_) stragglers.push_back(straggler_json(s));
  const std::string document =
      json{{"nodes", nodes}, {"complete", complete}, {"stragglers", std::move(stragglers)}}.dump();
  auto replies = std::move(pending_views_);
  pending_views_.clear();
  for (auto& reply : replies) reply(document);
}

}  // namespace ddprun::agent
