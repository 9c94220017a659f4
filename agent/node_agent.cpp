#include "agent/node_agent.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "agent/child_reaper.hpp"
#include "agent/env_contract.hpp"
#include "agent/error_file.hpp"
#include "agent/event_log.hpp"
#include "agent/exit_summary.hpp"
#include "agent/output_pump.hpp"
#include "agent/run_layout.hpp"
#include "agent/supervision_policy.hpp"
#include "common/error.hpp"
#include "common/process/process_tree.hpp"
#include "common/process/spawn.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace {
namespace asio = boost::asio;
using nlohmann::json;

// After every process is gone the pipes reach end of file at once; this only bounds the wait for a
// writer that escaped through fd passing to a process outside our tree.
constexpr std::chrono::seconds kDrainLimit{2};

class NodeAgent {
 public:
  explicit NodeAgent(const AgentConfig& config)
      : config_(config), log_(config.log.for_part("ddprun")),
        stop_signals_(io_, SIGINT, SIGTERM, SIGHUP),
        notice_signals_(io_, SIGUSR1, SIGUSR2),
        reaper_(io_, [this](pid_t pid, const process::ExitStatus& s) { on_child_exit(pid, s); },
                [this](bool has_children) { after_reap(has_children); }),
        grace_timer_(io_), drain_timer_(io_) {}

  int run();

 private:
  void start_workers();
  void start_worker(int local_rank);
  int open_target(int local_rank, int stream_bit, bool& console, int& file_fd);
  void wait_signal(asio::signal_set& set);
  void on_signal(int signal);
  void on_child_exit(pid_t pid, const process::ExitStatus& status);
  void after_reap(bool has_children);
  void apply(const Decision& d, const char* reason);
  void signal_everything(int signal, bool include_descendants);
  void arm_grace();
  void on_grace_expired();
  void maybe_finish();

  const AgentConfig& config_;
  Logger log_;
  asio::io_context io_;
  asio::signal_set stop_signals_;
  asio::signal_set notice_signals_;
  ChildReaper reaper_;
  asio::steady_timer grace_timer_;
  asio::steady_timer drain_timer_;
  SupervisionPolicy policy_;
  RunLayout layout_;
  EventLog events_;
  std::unordered_map<pid_t, int> local_rank_of_;
  std::vector<std::unique_ptr<OutputPump>> pumps_;
  bool grace_armed_ = false;
  bool killing_stragglers_ = false;
  bool processes_gone_ = false;
  bool finished_ = false;
  std::int64_t start_ms_ = 0;
};

int NodeAgent::run() {
  // Set-up that can fail comes first, so that a failure leaves no worker started.
  layout_ = RunLayout::create(config_.log_dir, config_.world.run_id);
  try {
    layout_.prepare_attempt(config_.world.restart_count, config_.world.local_world_size);
    if (!config_.events_file.empty()) events_ = EventLog(config_.events_file);
    process::become_child_subreaper();
  } catch (...) {
    layout_.cleanup();
    throw;
  }
  // A console that went away must not kill the agent (workers still need tearing down); workers get
  // SIGPIPE back by default through spawn's reset of dispositions.
  std::signal(SIGPIPE, SIG_IGN);
  stop_signals_.add(SIGQUIT);
  wait_signal(stop_signals_);
  wait_signal(notice_signals_);
  reaper_.start();

  start_ms_ = unix_ms();
  start_workers();
  io_.run();

  const std::int64_t end_ms = unix_ms();
  SummaryContext ctx{config_.host, config_.world.node_rank, start_ms_, end_ms,
                     layout_.temporary() ? std::string() : layout_.root()};
  const int code = policy_.exit_code();
  if (code != 0) {
    write_all(2, summary_text(policy_, ctx));
  } else {
    log_.info(summary_text(policy_, ctx).substr(8));  // "ddprun: " is already in the log tag
  }
  events_.write(summary_json(policy_, ctx));
  layout_.cleanup();
  return code;
}

void NodeAgent::start_workers() {
  const World& w = config_.world;
  for (int lr = 0; lr < w.local_world_size; ++lr) {
    if (policy_.phase() != Phase::kRunning) break;  // a signal or an early failure already stopped the job
    start_worker(lr);
  }
  log_.info("started ", w.local_world_size, " workers: ranks ", w.rank_offset, "-",
            w.rank_offset + w.local_world_size - 1, " of ", w.world_size, " (node ", w.node_rank, " of ", w.nnodes,
            "), master ", w.master_addr, ":", w.master_port, ", run id ", w.run_id, ", attempt ", w.restart_count);
}

// Decides where one stream of a worker goes. Returns the fd the child writes to (a pipe's write end, or
// /dev/null); fills `console` and `file_fd` for the pump. -1 when no pump is needed.
int NodeAgent::open_target(int local_rank, int stream_bit, bool& console, int& file_fd) {
  const OutputConfig& out = config_.output;
  const bool redirected = (out.redirects.mask_for(local_rank) & stream_bit) != 0;
  const bool teed = (out.tee.mask_for(local_rank) & stream_bit) != 0;
  const auto& filter = out.console_local_ranks;
  console = !redirected && (filter.empty() || std::count(filter.begin(), filter.end(), local_rank) > 0);
  file_fd = -1;
  if (redirected || teed) {
    const int attempt = config_.world.restart_count;
    const std::string path = stream_bit == kStdout ? layout_.stdout_file(attempt, local_rank)
                                                   : layout_.stderr_file(attempt, local_rank);
    file_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file_fd < 0) throw SystemError("cannot create " + path, errno);
  }
  return (console || file_fd >= 0) ? 0 : -1;
}

void NodeAgent::start_worker(int local_rank) {
  const World& w = config_.world;
  const int rank = w.rank_offset + local_rank;
  process::SpawnOptions opts;
  opts.program = config_.program;
  opts.argv = config_.argv;
  opts.env = worker_environment(config_.base_env, w,
                                {local_rank, layout_.error_file(w.restart_count, local_rank), ::getpid()});
  ::unlink(layout_.error_file(w.restart_count, local_rank).c_str());

  std::string prefix;
  expand_prefix(config_.output.prefix_format, rank, local_rank, w.node_rank, w.role, prefix);
  struct Route {
    int bit;
    int console_fd;
    Pipe pipe;
    bool console = false;
    int file_fd = -1;
  };
  Route routes[2] = {{kStdout, 1, {}}, {kStderr, 2, {}}};
  int null_fd = -1;
  for (Route& r : routes) {
    if (open_target(local_rank, r.bit, r.console, r.file_fd) == 0) {
      r.pipe = make_output_pipe();
    } else {
      if (null_fd < 0) null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      r.pipe.write_fd = null_fd;
    }
  }
  opts.stdout_fd = routes[0].pipe.write_fd;
  opts.stderr_fd = routes[1].pipe.write_fd;

  pid_t pid = 0;
  process::ExitStatus exec_failure;
  bool exec_failed = false;
  try {
    pid = process::spawn(opts);
  } catch (const process::ExecError& e) {
    log_.error("rank ", rank, ": ", e.what());
    exec_failure.code = e.exit_code();
    exec_failed = true;
  }
  // The child has its copies; ours must go, or the pipes would never reach end of file.
  for (Route& r : routes)
    if (r.pipe.write_fd >= 0 && r.pipe.write_fd != null_fd) ::close(r.pipe.write_fd);
  if (null_fd >= 0) ::close(null_fd);

  for (Route& r : routes) {
    if (r.pipe.read_fd < 0) continue;
    PumpTargets t{r.console ? r.console_fd : -1, r.file_fd, prefix};
    pumps_.push_back(std::make_unique<OutputPump>(io_, r.pipe.read_fd, t, [this] { maybe_finish(); }));
    pumps_.back()->start();
  }

  const std::int64_t now = unix_ms();
  policy_.add_worker(rank, local_rank, pid, now);
  if (exec_failed) {
    apply(policy_.on_exit(local_rank, exec_failure, now), "worker_failed");
    return;
  }
  local_rank_of_[pid] = local_rank;
  log_.debug("rank ", rank, " started, pid ", pid);
  events_.write(json{{"event", "started"}, {"time_ms", now}, {"rank", rank}, {"local_rank", local_rank},
                     {"pid", pid}, {"node_rank", w.node_rank}});
}

void NodeAgent::wait_signal(asio::signal_set& set) {
  set.async_wait([this, &set](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    on_signal(signal);
    wait_signal(set);
  });
}

void NodeAgent::on_signal(int signal) {
  log_.info("received ", process::signal_name(signal));
  events_.write(json{{"event", "signal"}, {"time_ms", unix_ms()}, {"signal", signal},
                     {"signal_name", process::signal_name(signal)}});
  apply(policy_.on_signal(signal, unix_ms()), "signal");
}

void NodeAgent::on_child_exit(pid_t pid, const process::ExitStatus& status) {
  auto it = local_rank_of_.find(pid);
  if (it == local_rank_of_.end()) {
    log_.debug("reaped descendant pid ", pid, " (", status.describe(), ")");
    return;
  }
  const int lr = it->second;
  local_rank_of_.erase(it);
  const std::int64_t now = unix_ms();
  if (!status.success()) {
    const ErrorFileContents ef = read_error_file(layout_.error_file(config_.world.restart_count, lr));
    if (ef.present) policy_.worker(lr).error_message = ef.message;
  }
  const Decision d = policy_.on_exit(lr, status, now);
  const WorkerRecord& w = policy_.worker(lr);
  json e = worker_json(w);
  e["event"] = "exited";
  e["node_rank"] = config_.world.node_rank;
  events_.write(e);
  if (w.state == WorkerState::kFailed)
    log_.error("rank ", w.rank, " (pid ", pid, ") failed: ", status.describe());
  else
    log_.debug("rank ", w.rank, " (pid ", pid, ") ", to_string(w.state), ": ", status.describe());
  apply(d, "worker_failed");
}

void NodeAgent::apply(const Decision& d, const char* reason) {
  if (d.teardown_began) {
    log_.info("tearing down: ", reason, ", sending ", process::signal_name(d.signal_all), " to every worker");
    events_.write(json{{"event", "teardown"}, {"time_ms", policy_.teardown_ms()}, {"reason", reason},
                       {"signal", d.signal_all}});
  }
  if (d.signal_all != 0) {
    const bool stops = d.signal_all != SIGUSR1 && d.signal_all != SIGUSR2;
    signal_everything(d.signal_all, stops);
  }
  if (d.arm_grace) arm_grace();
}

void NodeAgent::signal_everything(int signal, bool include_descendants) {
  // Only the groups of workers still running: a reaped worker's pid (its group id) may be reused.
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0) process::signal_group(w.pid, signal);
  // Descendants that left their worker's group (setsid, daemonised) or outlived their worker.
  if (include_descendants) process::signal_each(process::descendants_of(::getpid()), signal);
}

void NodeAgent::arm_grace() {
  if (grace_armed_) return;
  grace_armed_ = true;
  grace_timer_.expires_after(config_.term_timeout);
  grace_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_grace_expired();
  });
}

void NodeAgent::on_grace_expired() {
  log_.warning("grace period of ", config_.term_timeout.count(), " ms over: sending SIGKILL");
  killing_stragglers_ = true;
  apply(policy_.on_grace_expired(unix_ms()), "grace_expired");
  process::signal_each(process::descendants_of(::getpid()), SIGKILL);
}

void NodeAgent::after_reap(bool has_children) {
  if (!policy_.all_exited()) {
    // While killing, anything a dying worker forked meanwhile is killed too.
    if (policy_.phase() == Phase::kKilling) process::signal_each(process::descendants_of(::getpid()), SIGKILL);
    return;
  }
  if (has_children) {
    // Every worker is gone but something they started lives on: it goes the same way, SIGTERM then
    // SIGKILL after the grace period, so no process of the job outlives ddprun.
    const bool killing = killing_stragglers_ || policy_.phase() == Phase::kKilling;
    const auto stragglers = process::descendants_of(::getpid());
    if (!stragglers.empty()) {
      log_.debug(stragglers.size(), " leftover descendant(s): ", killing ? "SIGKILL" : "SIGTERM");
      process::signal_each(stragglers, killing ? SIGKILL : SIGTERM);
    }
    arm_grace();
    return;
  }
  if (processes_gone_) return;
  processes_gone_ = true;
  grace_timer_.cancel();
  drain_timer_.expires_after(kDrainLimit);
  drain_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    log_.warning("worker output still open ", kDrainLimit.count(), " s after every process ended; closing it");
    for (auto& p : pumps_) p->abandon();
  });
  maybe_finish();
}

void NodeAgent::maybe_finish() {
  if (finished_ || !processes_gone_) return;
  if (!std::all_of(pumps_.begin(), pumps_.end(), [](const auto& p) { return p->finished(); })) return;
  finished_ = true;
  reaper_.stop();
  boost::system::error_code ignored;
  stop_signals_.cancel(ignored);
  notice_signals_.cancel(ignored);
  drain_timer_.cancel();
  grace_timer_.cancel();
}

}  // namespace

int run_node_agent(const AgentConfig& config) {
  NodeAgent agent(config);
  return agent.run();
}

}  // namespace ddprun::agent
