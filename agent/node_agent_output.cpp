// The agent's output side: ddprun's console (common/console.hpp), the workers' log files (a WriteQueue
// each, common/write_queue.hpp) and the streams waiting for room in either, log and events files that
// cannot be written, what of the output was lost, and what the end-of-job summary is made from.
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/node_agent_impl.hpp"

#include <boost/asio/post.hpp>
#include "common/console.hpp"
#include "common/counted.hpp"
#include "common/process/wait_status.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace {
// After every process is gone the pipes reach end of file at once; this only bounds the wait for a
// writer that escaped through fd passing to a process outside our tree.
constexpr std::chrono::seconds kDrainLimit{2};

// "3 lines (120 bytes)": what a log file or a console channel lost (WriteQueueStats, console::ChannelStats).
template <typename Stats>
std::string lines_and_bytes(const Stats& st) {
  return counted(static_cast<long long>(st.lost_lines), "line") + " (" +
         counted(static_cast<long long>(st.lost_bytes), "byte") + ")";
}
}  // namespace

sigset_t stop_signals() {
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig = 1; sig < NSIG; ++sig)
    if (is_stop_signal(sig)) sigaddset(&stops, sig);
  return stops;
}
namespace asio = boost::asio;
using nlohmann::json;

// What ddprun writes last (the summary) reaches a console that stalls once it drains; a stop signal
// (Ctrl-C, SIGTERM) gives up on it: the job is over and its exit code settled.
void NodeAgent::drain_console() {
  if (console::drain(stop_signals())) return;
  events_.write(json{{"event", "console_abandoned"}, {"time_ms", unix_ms()},
                     {"lost_bytes", console::stats(1).lost_bytes + console::stats(2).lost_bytes}});
}

// An events file that could not be written all through is exit code 73 (README "Exit codes") when the job
// itself succeeded; a failed job keeps its root cause's code, and the summary says what the file lacks.
// Waits for the events file's last lines first (a stop signal gives up on a file system that does not answer).
int NodeAgent::events_exit_code(int job_code) {
  events_.drain(stop_signals());
  if (!events_.failed()) return job_code;
  const std::string why = events_.failed_errno() == EINTR ? std::string("given up: its file system did not answer")
                                                          : "writing it failed (" +
                                                                std::string(std::strerror(events_.failed_errno())) + ")";
  const std::string what = "the events file " + config_.events_file + " is incomplete: " + why + " after " +
                           counted(static_cast<long long>(events_.bytes_written()), "byte");
  if (job_code != 0) {
    log_.error(what, "; the exit code stays the job's (", job_code, ")");
    return job_code;
  }
  console::write(2, "ddprun: error: " + what + "; exit code " + std::to_string(kExitCantCreate) + "\n");
  return kExitCantCreate;
}

// A log file is created and written by a thread of its own: a file system that stops answering (a
// hard-mounted NFS server gone) holds that thread, and through the queue's high water the worker, never
// the loop. One that cannot be created is reported like a failed write: the job goes on.
std::shared_ptr<WriteQueue> NodeAgent::open_log_queue(int rank, const std::string& path) {
  if (log_drained_fd_ < 0) log_drained_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  WriteQueue::Options options;
  options.high_water = kOutputHighWater;
  options.drained_fd = log_drained_fd_;
  options.on_break = [failures = log_failures_, rank, path](int err, std::uint64_t written, bool opened) {
    std::lock_guard<std::mutex> lock(failures->mu);
    failures->pending.emplace_back(rank, FileWriteFailure{path, err, written, !opened});
    if (failures->wake) failures->wake();
  };
  auto queue = WriteQueue::create_file(path, std::move(options));
  queue->set_on_room(room_callback());
  queue->start();
  log_files_.push_back(LogFile{rank, path, queue});
  return queue;
}

void NodeAgent::report_log_failures() {
  std::vector<std::pair<int, FileWriteFailure>> failures;
  {
    std::lock_guard<std::mutex> lock(log_failures_->mu);
    failures.swap(log_failures_->pending);
  }
  for (const auto& [rank, f] : failures) on_log_file_failure(rank, f);
}

// At the end, after the loop: the log files get what is queued for them (a stop signal gives up on it;
// the summary says what was not written). The eventfd stays open: a write abandoned here may still return
// later in a writer thread, which then pokes it.
void NodeAgent::drain_log_files() {
  {
    std::lock_guard<std::mutex> lock(log_failures_->mu);
    log_failures_->wake = nullptr;  // the loop is done: failures are taken below
  }
  for (LogFile& f : log_files_) f.queue->set_on_room(nullptr);
  // A job stopped by a signal (SIGTERM, Ctrl-C) is not held by a file system that stopped answering: what a
  // stalled file still waits for is given up, as when the signal comes during this wait.
  if (policy_.stop_signal() != 0)
    for (LogFile& f : log_files_)
      if (f.queue->stalled()) f.queue->abandon();
  std::vector<WriteQueue*> queues;
  for (LogFile& f : log_files_) queues.push_back(f.queue.get());
  if (!queues.empty() && !wait_until_idle(queues, log_drained_fd_, stop_signals())) {
    log_.warning("stopped while waiting for the log files' file system: the rest of the workers' output is not "
                 "written to them");
    for (WriteQueue* q : queues) q->abandon();
  }
  report_log_failures();
  for (LogFile& f : log_files_) {
    const WriteQueueStats st = f.queue->stats();
    if (st.abandoned && st.broken_errno == 0 && st.lost_bytes > 0)
      output_losses_.push_back("rank " + std::to_string(f.rank) + "'s " + f.path + ": " + lines_and_bytes(st) +
                               " not written (given up on the file system)");
  }
}

void NodeAgent::on_log_file_failure(int rank, const FileWriteFailure& f) {
  const std::string what = "rank " + std::to_string(rank) + "'s " + f.path +
                           (f.never_opened ? " could not be created"
                                           : " stopped at " + std::to_string(f.bytes_written) + " bytes") +
                           ": " + std::strerror(f.error);
  log_.error("cannot write a log file: ", what, "; the file is closed, the job goes on (the console still shows "
             "what it was shown)");
  events_.write(json{{"event", "log_write_failed"}, {"time_ms", unix_ms()}, {"rank", rank}, {"path", f.path},
                     {"errno", f.error}, {"error", std::strerror(f.error)}, {"bytes_written", f.bytes_written},
                     {"created", !f.never_opened}});
  output_losses_.push_back(what);
}

// Called from a writer thread once a congested queue (the console's, a log file's) has room again.
std::function<void()> NodeAgent::room_callback() {
  return [this] { asio::post(io_, [this] { resume_waiting_pumps(); }); };
}

void NodeAgent::resume_waiting_pumps() {
  // Every pump that stopped reading because the console was congested reads again; one that finds it
  // congested at once waits again (in this list).
  std::vector<OutputPump*> waiting;
  waiting.swap(pump_scratch_.waiting_for_room);
  for (OutputPump* p : waiting) p->resume();
}

SummaryContext NodeAgent::summary_context() const {
  SummaryContext ctx;
  ctx.host = config_.host;
  ctx.node_rank = world_.node_rank;
  ctx.start_ms = start_ms_;
  ctx.end_ms = unix_ms();
  ctx.log_root = layout_.temporary() ? std::string() : layout_.root();
  ctx.error_file_of = [this](int lr) { return layout_.error_file(workers_attempt_, lr); };
  ctx.shown_path = [this](const std::string& p) { return layout_.published(p); };
  ctx.worker_dir_of = [this](int lr) { return layout_.worker_dir(workers_attempt_, lr); };
  ctx.stderr_tail_of = [this](int lr) -> const StreamTail* {
    auto it = stderr_tails_.find(lr);
    return it == stderr_tails_.end() ? nullptr : it->second.get();
  };
  ctx.python = config_.python;
  ctx.python_origin = config_.python_origin;
  ctx.local_rank_arg = config_.local_rank_arg;
  ctx.local_rank_arg_detected = config_.local_rank_arg_detected;
  ctx.stdin_rank = config_.stdin_rank;
  ctx.attempts = attempts_;
  ctx.output_losses = output_losses_;
  for (const NcclDump& d : hang_.nccl_dumps()) ctx.nccl_dumps.push_back({d.rank, d.shown});
  note_console_losses(ctx.output_losses);
  return ctx;
}

// A console that broke (its reader gone for good: EPIPE, EIO) lost what came after: the summary says how much.
void NodeAgent::note_console_losses(std::vector<std::string>& losses) const {
  for (int fd : {1, 2}) {
    if (fd == 2 && console::shared_channel()) break;
    const console::ChannelStats st = console::stats(fd);
    if (st.lost_bytes == 0) continue;
    losses.push_back("ddprun's " + console::channel_name(fd) + " " +
                     (st.broken_errno != 0 ? "closed (" + std::string(std::strerror(st.broken_errno)) + ")"
                                           : std::string("was abandoned")) +
                     ": " + lines_and_bytes(st) + " not shown" +
                     (layout_.temporary() ? "" : "; files under --log-dir keep what was teed"));
  }
}

// Bounds the wait for a stream whose writer escaped our tree (fd passing). A stream that waits for room on
// the console is not stuck: its bytes are in the pipe and go out when the console drains; only a stop
// signal gives up on those (on_signal).
void NodeAgent::arm_drain_limit() {
  drain_timer_.expires_after(kDrainLimit);
  drain_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    bool console_waits = false;
    for (auto& p : pumps_) {
      if (p->finished()) continue;
      if (p->waiting_for_room()) {
        console_waits = true;
        continue;
      }
      log_.warning("worker output still open ", kDrainLimit.count(), " s after every process ended; closing it");
      p->abandon();
    }
    if (console_waits) arm_drain_limit();
  });
}

// Something the end waits for does not move: a stream waiting for room, a log file's write that hangs.
bool NodeAgent::output_stalled() const {
  return any_pump_waiting_for_room() ||
         std::any_of(log_files_.begin(), log_files_.end(), [](const LogFile& f) { return f.queue->stalled(); });
}

bool NodeAgent::any_pump_waiting_for_room() const {
  auto waiting = [](const auto& p) { return p->waiting_for_room(); };
  return std::any_of(pumps_.begin(), pumps_.end(), waiting) ||
         std::any_of(retired_pumps_.begin(), retired_pumps_.end(), waiting);
}

void NodeAgent::abandon_stalled_output(int signal) {
  log_.warning(process::signal_name(signal), " while waiting for the console or a log file to take the output: "
               "the rest of what waits for them is given up");
  console::abandon_stalled();
  for (LogFile& f : log_files_)
    if (f.queue->stalled()) f.queue->abandon();
  for (auto* list : {&pumps_, &retired_pumps_})
    for (auto& p : *list)
      if (p->waiting_for_room()) p->abandon();
}

}  // namespace ddprun::agent
