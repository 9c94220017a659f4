#include "agent/output_routing.hpp"

#include <sys/eventfd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/event_kinds.hpp"
#include "agent/line_framer.hpp"
#include "common/console.hpp"
#include "common/counted.hpp"
#include "common/process/wait_status.hpp"
#include "agent/supervision_policy.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
using nlohmann::json;

namespace {
// After every process is gone the pipes reach end of file at once; this only bounds the wait for a
// writer that escaped through fd passing to a process outside our tree.
constexpr std::chrono::seconds kDrainLimit{2};

// Enough for a Python traceback's last five frames with their source lines and markers, and the exception
// (a torch path alone is ~100 bytes); kept for every worker whose stderr is read.
constexpr std::size_t kStderrTailBytes = 8192;

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

OutputRouting::OutputRouting(boost::asio::io_context& io, const AgentConfig& config, const World& world, Logger& log,
                             EventLog& events, std::function<void()> on_stream_end)
    : io_(io), config_(config), world_(world), log_(log), events_(events), on_stream_end_(std::move(on_stream_end)),
      drain_timer_(io) {}

// The pumps go first (they point into scratch_). A log queue's thread may outlive this object (it holds its
// queue): neither it nor the console may post to a loop that is gone.
OutputRouting::~OutputRouting() {
  console::set_on_room(nullptr);
  {
    std::lock_guard<std::mutex> lock(failures_->mu);
    failures_->wake = nullptr;
  }
  for (LogFile& f : log_files_) f.queue->set_on_room(nullptr);
  pumps_.clear();
  retired_pumps_.clear();
}

void OutputRouting::start() {
  console::set_on_room(room_callback());
  failures_->wake = [this] { boost::asio::post(io_, [this] { take_log_failures(); }); };
}

OutputRouting::Target OutputRouting::target_of(int local_rank, int stream_bit) const {
  const OutputConfig& out = config_.output;
  const bool redirected = (out.redirects.mask_for(local_rank) & stream_bit) != 0;
  const bool teed = (out.tee.mask_for(local_rank) & stream_bit) != 0;
  const auto& filter = out.console_local_ranks;
  Target t;
  t.console = !redirected && (filter.empty() || std::count(filter.begin(), filter.end(), local_rank) > 0);
  t.file = redirected || teed;
  return t;
}

std::string OutputRouting::prefix_of(int rank, int local_rank) const {
  std::string prefix;
  expand_prefix(config_.output.prefix_format, rank, local_rank, world_.node_rank, world_.role, config_.host, prefix);
  return prefix;
}

void OutputRouting::add_stream(int rank, int local_rank, int stream_bit, int read_fd, Target target,
                               const std::string& log_path) {
  PumpTargets t;
  t.console_fd = target.console ? (stream_bit == kStdout ? 1 : 2) : -1;
  if (target.file) t.file = open_log_queue(rank, log_path);
  t.prefix = prefix_of(rank, local_rank);
  t.local_rank = local_rank;
  if (stream_bit == kStderr) {  // for the summary: the exception of a worker that wrote no error file
    t.tail = std::make_shared<StreamTail>(kStderrTailBytes);
    stderr_tails_[local_rank] = t.tail;
  }
  pumps_.push_back(std::make_unique<OutputPump>(io_, read_fd, std::move(t), scratch_, on_stream_end_));
  pumps_.back()->start();
}

void OutputRouting::set_rank(int local_rank, int rank) {
  const std::string prefix = prefix_of(rank, local_rank);
  for (auto& p : pumps_)
    if (p->local_rank() == local_rank) p->set_prefix(prefix);
}

bool OutputRouting::round_drained(bool restart) const {
  auto done = [restart](const auto& p) { return p->finished() || (restart && p->waiting_for_room()); };
  if (!std::all_of(pumps_.begin(), pumps_.end(), done)) return false;
  return restart || std::all_of(retired_pumps_.begin(), retired_pumps_.end(), done);
}

void OutputRouting::arm_drain_limit() {
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

void OutputRouting::retire_round() {
  drain_timer_.cancel();
  retired_pumps_.erase(std::remove_if(retired_pumps_.begin(), retired_pumps_.end(),
                                      [](const auto& p) { return p->finished(); }),
                       retired_pumps_.end());
  for (auto& p : pumps_)
    if (!p->finished()) retired_pumps_.push_back(std::move(p));
  pumps_.clear();
}

bool OutputRouting::stalled() const {
  return any_pump_waiting_for_room() ||
         std::any_of(log_files_.begin(), log_files_.end(), [](const LogFile& f) { return f.queue->stalled(); });
}

bool OutputRouting::any_pump_waiting_for_room() const {
  auto waiting = [](const auto& p) { return p->waiting_for_room(); };
  return std::any_of(pumps_.begin(), pumps_.end(), waiting) ||
         std::any_of(retired_pumps_.begin(), retired_pumps_.end(), waiting);
}

void OutputRouting::abandon_stalled(int signal) {
  log_.warning(process::signal_name(signal), " while waiting for the console or a log file to take the output: "
               "the rest of what waits for them is given up");
  console::abandon_stalled();
  for (LogFile& f : log_files_)
    if (f.queue->stalled()) f.queue->abandon();
  for (auto* list : {&pumps_, &retired_pumps_})
    for (auto& p : *list)
      if (p->waiting_for_room()) p->abandon();
}

// A log file is created and written by a thread of its own: a file system that stops answering (a
// hard-mounted NFS server gone) holds that thread, and through the queue's high water the worker, never
// the loop. One that cannot be created is reported like a failed write: the job goes on.
std::shared_ptr<WriteQueue> OutputRouting::open_log_queue(int rank, const std::string& path) {
  if (drained_fd_ < 0) drained_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  WriteQueue::Options options;
  options.high_water = kOutputHighWater;
  options.drained_fd = drained_fd_;
  options.on_break = [failures = failures_, rank, path](int err, std::uint64_t written, bool opened) {
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

void OutputRouting::take_log_failures() {
  std::vector<std::pair<int, FileWriteFailure>> failures;
  {
    std::lock_guard<std::mutex> lock(failures_->mu);
    failures.swap(failures_->pending);
  }
  for (const auto& [rank, f] : failures) on_log_failure(rank, f);
}

void OutputRouting::on_log_failure(int rank, const FileWriteFailure& f) {
  const std::string what = "rank " + std::to_string(rank) + "'s " + f.path +
                           (f.never_opened ? " could not be created"
                                           : " stopped at " + std::to_string(f.bytes_written) + " bytes") +
                           ": " + std::strerror(f.error);
  log_.error("cannot write a log file: ", what, "; the file is closed, the job goes on (the console still shows "
             "what it was shown)");
  events_.write(event::log_write_failed(unix_ms(), rank, f.path, f.error, f.bytes_written, !f.never_opened));
  losses_.push_back(what);
}

// Called from a writer thread once a congested queue (the console's, a log file's) has room again.
std::function<void()> OutputRouting::room_callback() {
  return [this] { boost::asio::post(io_, [this] { resume_waiting_pumps(); }); };
}

void OutputRouting::resume_waiting_pumps() {
  // Every pump that stopped reading because the console was congested reads again; one that finds it
  // congested at once waits again (in this list).
  std::vector<OutputPump*> waiting;
  waiting.swap(scratch_.waiting_for_room);
  for (OutputPump* p : waiting) p->resume();
}

// The eventfd stays open: a write abandoned here may still return later in a writer thread, which then pokes it.
void OutputRouting::drain_files_after_loop(bool stopped_by_signal) {
  console::set_on_room(nullptr);  // the loop is done: nothing may be posted to it any more
  {
    std::lock_guard<std::mutex> lock(failures_->mu);
    failures_->wake = nullptr;  // failures are taken below
  }
  for (LogFile& f : log_files_) f.queue->set_on_room(nullptr);
  // A job stopped by a signal (SIGTERM, Ctrl-C) is not held by a file system that stopped answering: what a
  // stalled file still waits for is given up, as when the signal comes during this wait.
  if (stopped_by_signal)
    for (LogFile& f : log_files_)
      if (f.queue->stalled()) f.queue->abandon();
  std::vector<WriteQueue*> queues;
  for (LogFile& f : log_files_) queues.push_back(f.queue.get());
  if (!queues.empty() && !wait_until_idle(queues, drained_fd_, stop_signals())) {
    log_.warning("stopped while waiting for the log files' file system: the rest of the workers' output is not "
                 "written to them");
    for (WriteQueue* q : queues) q->abandon();
  }
  take_log_failures();
  for (LogFile& f : log_files_) {
    const WriteQueueStats st = f.queue->stats();
    if (st.abandoned && st.broken_errno == 0 && st.lost_bytes > 0)
      losses_.push_back("rank " + std::to_string(f.rank) + "'s " + f.path + ": " + lines_and_bytes(st) +
                        " not written (given up on the file system)");
  }
}

void OutputRouting::drain_console() {
  if (console::drain(stop_signals())) return;
  events_.write(event::console_abandoned(unix_ms(), console::stats(1).lost_bytes + console::stats(2).lost_bytes));
}

const StreamTail* OutputRouting::stderr_tail(int local_rank) const {
  auto it = stderr_tails_.find(local_rank);
  return it == stderr_tails_.end() ? nullptr : it->second.get();
}

// A console that broke (its reader gone for good: EPIPE, EIO) lost what came after: the summary says how much.
std::vector<std::string> OutputRouting::losses() const {
  std::vector<std::string> all = losses_;
  const bool kept_in_files = !config_.log_dir.empty();
  for (int fd : {1, 2}) {
    if (fd == 2 && console::shared_channel()) break;
    const console::ChannelStats st = console::stats(fd);
    if (st.lost_bytes == 0) continue;
    all.push_back("ddprun's " + console::channel_name(fd) + " " +
                  (st.broken_errno != 0 ? "closed (" + std::string(std::strerror(st.broken_errno)) + ")"
                                        : std::string("was abandoned")) +
                  ": " + lines_and_bytes(st) + " not shown" +
                  (kept_in_files ? "; files under --log-dir keep what was teed" : ""));
  }
  return all;
}

}  // namespace ddprun::agent
