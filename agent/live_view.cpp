// The node's live view (agent/live_view.hpp): samples, the rendezvous' status reports, --metrics-textfile,
// ddprun-status requests and the stragglers the rendezvous names.
#include "agent/live_view.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "agent/event_kinds.hpp"
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

LiveView::LiveView(boost::asio::io_context& io, const AgentConfig& config, const World& world, HeartbeatChannel& beats,
                   const SupervisionPolicy& policy, Logger& log, EventLog& events,
                   Host host)
    : io_(io), config_(config), world_(world), beats_(beats), policy_(policy), log_(log), events_(events),
      host_(std::move(host)), tick_timer_(io), view_timer_(io) {}

LiveView::~LiveView() = default;

void LiveView::start(std::int64_t agent_started_ms) {
  started_ms_ = agent_started_ms;
  rates_ = RateHistory(std::chrono::nanoseconds(config_.straggler_window).count());
  socket_ = std::make_unique<StatusSocket>(io_, [this](StatusSocket::Reply reply) { on_request(std::move(reply)); });
  std::string problem;
  if (!socket_->open(world_.run_id, problem)) log_.warning("no live view for ddprun-status: ", problem);
  else log_.debug("live view: ", socket_->path());
  tick();
}

void LiveView::stop() {
  tick_timer_.cancel();
  view_timer_.cancel();
  if (socket_) socket_->close();
  answer_pending(nullptr);
  // The job is over here: its series leave the collector with it, instead of standing still as if it ran on.
  textfile_.reset();
}

void LiveView::tick() {
  if (host_.finished()) return;
  const NodeStatus status = sample(/*remember=*/true);
  if (host_.placed_once()) {
    // One node too: its own server judges its ranks' paces. A status beyond the protocol's bound would be a
    // protocol error at the server (this node lost): not sent.
    std::string text = json(status).dump();
    if (text.size() * 2 <= rendezvous::kMaxNodeStatusBytes) host_.report_status(std::move(text), running_paces());
  }
  if (!config_.metrics_textfile_dir.empty()) write_textfile(status);
  const auto period = status_period();
  if (period.count() == 0) return;
  tick_timer_.expires_after(std::max(period, std::chrono::milliseconds(50)));
  tick_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void LiveView::write_textfile(const NodeStatus& status) {
  if (!textfile_) textfile_ = std::make_unique<TextfileWriter>(config_.metrics_textfile_dir);
  // The writer's failure, if any, is from an earlier period: said once per failing spell.
  if (const std::string problem = textfile_->take_problem(); !problem.empty())
    log_.warning("--metrics-textfile: ", problem, " (the job goes on; tried again every period)");
  NodeStatus named = status;
  named.run_id = metrics_run_id(status.run_id, ::getpid());
  textfile_->publish(textfile_name(named), prometheus_text(named));
}

NodeStatus LiveView::sample(bool remember) {
  NodeStatus s;
  s.node_rank = world_.node_rank;
  s.host = config_.host;
  s.state = host_.agent_state();
  s.run_id = world_.run_id;
  s.restart_count = world_.restart_count;
  s.max_restarts = world_.max_restarts;
  s.world_size = world_.world_size;
  s.nnodes = world_.nnodes;
  s.started_ms = started_ms_;
  s.time_ms = unix_ms();
  const std::int64_t now_ns = monotonic_ns();
  const std::int64_t window_ns = std::chrono::nanoseconds(config_.straggler_window).count();
  std::vector<pid_t> pids;
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0) pids.push_back(w.pid);
  const std::map<pid_t, TreeUsage> usage = tree_usages(pids);
  const double dt_s = static_cast<double>(now_ns - sampled_ns_) / 1e9;
  std::map<pid_t, double> cpu_now;
  for (const WorkerRecord& w : policy_.workers()) {
    RankStatus r;
    r.rank = w.rank;
    r.local_rank = w.local_rank;
    r.pid = w.pid;
    const bool running = w.state == WorkerState::kRunning;
    if (beats_.enabled() && w.local_rank < beats_.slots()) {
      const Beat beat = beats_.read(w.local_rank);
      if (beat.foreign_clock && running && beats_.take_foreign_clock_notice(w.local_rank))
        log_.warning("rank ", w.rank, " (pid ", w.pid, ") beats with a time from another clock than CLOCK_MONOTONIC "
                     "(Python's time.monotonic_ns(), C++'s std::chrono::steady_clock): its beats are ignored, so "
                     "--hang-timeout and the live view see none");
      if (beat.ever() && running) {
        if (beat.step >= 0) r.step = beat.step;
        // A beat written after now_ns was read is 0 s old, not -0.001 s.
        r.beat_age_s = static_cast<double>(std::max<std::int64_t>(0, now_ns - beat.time_ns)) / 1e9;
        if (beat.step >= 0 && remember) rates_.add(w.rank, w.pid, now_ns, beat.step, beat.work_ns);
      }
      if (running) r.steps_per_s = rates_.rate(w.rank);
      if (auto pace = rates_.pace(w.rank, window_ns); running && pace && pace->work_us >= 0)
        r.work_per_step_s = static_cast<double>(pace->work_us) / 1e6;
    }
    r.straggler = running && is_named(stragglers_, w.rank);
    if (auto u = usage.find(w.pid); running && u != usage.end()) {
      r.rss_bytes = u->second.rss_bytes;
      cpu_now[w.pid] = u->second.cpu_s;
      auto before = cpu_s_.find(w.pid);
      r.cpu_percent = cpu_percent(before == cpu_s_.end() ? std::nullopt : std::optional<double>(before->second),
                                  u->second.cpu_s, dt_s);
    }
    if (!running) r.state = w.state == WorkerState::kSucceeded ? "exited" : w.hung ? "hung" : "failed";
    else if (policy_.phase() != Phase::kRunning) r.state = "stopping";
    else if (host_.found_hung(w.local_rank)) r.state = "hung";
    // Under --hang-timeout the workers beat (the user said so): until the first beat a rank is starting. A
    // program that never beats is running from its start.
    else if (config_.hang_timeout.count() > 0 && !r.beat_age_s) r.state = "starting";
    // One word for the table, --json and the textfile alike (the table used to make "slow" of the flag).
    else r.state = r.straggler ? "slow" : "running";
    s.ranks.push_back(std::move(r));
  }
  if (remember) {
    cpu_s_ = std::move(cpu_now);
    sampled_ns_ = now_ns;
  }
  return s;
}

// Each running rank's pace over the straggler window, for the rendezvous' judgement (straggler_watch.hpp): only
// ranks that are running now, in a round that is running (a stopping round's paces describe no one).
std::vector<rendezvous::RankPace> LiveView::running_paces() const {
  std::vector<rendezvous::RankPace> paces;
  if (policy_.phase() != Phase::kRunning) return paces;
  const std::int64_t window_ns = std::chrono::nanoseconds(config_.straggler_window).count();
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning)
      if (auto pace = rates_.pace(w.rank, window_ns)) paces.push_back(*pace);
  return paces;
}

// Issue 33: a node kills a rank only on a judgement its own measurement supports: the rank's pace now, by the
// measure judged, past the line the rendezvous named it by (the others' median plus half the threshold: the
// margin a name goes by). A judgement gone stale (the rank recovered since), or one this node's own numbers do
// not bear out, is said and not acted on.
bool LiveView::own_pace_supports(const rendezvous::Straggler& s) const {
  const auto pace = rates_.pace(s.rank, std::chrono::nanoseconds(config_.straggler_window).count());
  if (!pace) return false;
  const std::int64_t own = s.work ? pace->work_us : pace->step_us;
  const double margin = 1 + std::max(config_.rdzv.job.stragglers.threshold, 0.0) / 2;
  return own > 0 && static_cast<double>(own) > static_cast<double>(s.median_us) * margin;
}

// The rendezvous named (or stopped naming) stragglers: said once each way, on every node, in the log and the
// events file; the live view marks them.
void LiveView::on_stragglers(const rendezvous::StragglersMsg& message) {
  const double window_s = std::chrono::duration<double>(config_.straggler_window).count();
  for (const rendezvous::Straggler& s : message.named) {
    if (is_named(stragglers_, s.rank)) continue;
    log_.warning(straggler_text(s, window_s));
    events_.write(event::straggler(unix_ms(), s, window_s));
    if (!config_.straggler_stop || s.node_rank != world_.node_rank || policy_.phase() != Phase::kRunning) continue;
    // --straggler-action stop: the rank goes as a failure of its own, its reason the straggler line, so that
    // every node's summary says why; the job ends, or restarts under --max-restarts.
    const int lr = s.rank - world_.rank_offset;
    if (lr < 0 || lr >= world_.local_world_size || lr >= static_cast<int>(policy_.workers().size())) continue;
    const WorkerRecord& w = policy_.workers()[static_cast<std::size_t>(lr)];
    if (w.state != WorkerState::kRunning || w.pid <= 0) continue;
    if (!own_pace_supports(s)) {
      log_.warning("rank ", s.rank, " is not stopped (--straggler-action stop): this node's own measurement of it ",
                   "over the window does not put it past the line the rendezvous named it by");
      continue;
    }
    host_.stop_straggler(lr, "stopped by --straggler-action stop: " + straggler_text(s, window_s));
  }
  for (const rendezvous::Straggler& s : stragglers_) {
    if (is_named(message.named, s.rank)) continue;
    log_.info("rank ", s.rank, " is no longer a straggler");
    events_.write(event::straggler_end(unix_ms(), s.rank, s.node_rank));
  }
  stragglers_ = message.named;
}

void LiveView::on_request(StatusSocket::Reply reply) {
  pending_.push_back(std::move(reply));
  if (pending_.size() > 1) return;  // a request to the rendezvous is already out
  if (world_.nnodes <= 1 || !host_.placed_once() || host_.finished()) return answer_pending(nullptr);
  host_.request_view();
  view_timer_.expires_after(kViewWait);
  view_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) answer_pending(nullptr);
  });
}

void LiveView::on_job_view(const rendezvous::JobViewMsg& view) {
  view_timer_.cancel();
  answer_pending(&view);
}

void LiveView::answer_pending(const rendezvous::JobViewMsg* view) {
  if (pending_.empty()) return;
  const std::string text = document(view);
  auto replies = std::move(pending_);
  pending_.clear();
  for (auto& reply : replies) reply(text);
}

// {"nodes": [...]}: this node sampled now (age 0), then every other node as the rendezvous last heard it.
std::string LiveView::document(const rendezvous::JobViewMsg* view) {
  json nodes = json::array();
  json here = sample(/*remember=*/false);
  here["age_ms"] = 0;
  nodes.push_back(here);
  if (view != nullptr) {
    for (std::size_t i = 0; i < view->nodes.size(); ++i) {
      json other = json::parse(view->nodes[i], nullptr, /*allow_exceptions=*/false);
      if (!other.is_object() || other.value("node_rank", -1) == world_.node_rank) continue;
      other["age_ms"] = view->ages_ms[i];
      // A rank's beat age is as of its node's report: it is that much older now (issue 56: a frozen node's rank
      // showed "last beat 0.14 s" while its node's figures were 15.7 s old).
      if (auto ranks = other.find("ranks"); ranks != other.end() && ranks->is_array())
        for (json& r : *ranks)
          if (r.is_object() && r.contains("beat_age_s") && r["beat_age_s"].is_number())
            r["beat_age_s"] = r["beat_age_s"].get<double>() + static_cast<double>(view->ages_ms[i]) / 1000.0;
      nodes.push_back(std::move(other));
    }
  }
  const bool complete = nodes.size() >= static_cast<std::size_t>(std::max(world_.nnodes, 1));
  json stragglers = json::array();
  for (const rendezvous::Straggler& s : stragglers_) stragglers.push_back(straggler_json(s));
  return json{{"nodes", nodes}, {"complete", complete}, {"stragglers", std::move(stragglers)}}.dump();
}

}  // namespace ddprun::agent
