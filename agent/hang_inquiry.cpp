#include "agent/hang_inquiry.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <nlohmann/json.hpp>

#include "agent/env_contract.hpp"
#include "agent/event_kinds.hpp"
#include "agent/flight_recorder.hpp"
#include "agent/hang_watch.hpp"
#include "common/process/process_tree.hpp"
#include "common/stall_clock.hpp"
#include "common/timeouts.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace rdzv = ddprun::rendezvous;
using nlohmann::json;

namespace {
// How long a node that found a hung worker waits for the rendezvous' verdict before it decides alone: the
// server waits up to 20 s for the other nodes' views (rendezvous/state_machine_hang.cpp), then answers. Also
// what a hang costs when its inquiry is lost with a restarted ddprun-rendezvous: this node's own verdict then
// reaches the others through the new server (the failure report is replayed after the resume hello).
constexpr std::chrono::milliseconds kVerdictLimit = timeouts::kHangVerdict;
// Children of a hung worker whose stacks are captured too, at most (each costs a stack tool's run); and of all the
// node's workers together, hung or not (issue 32: the job-wide verdict may name a rank this node did not find
// hung, when another node noticed first, and its stuck DataLoader worker's stack was then missing).
constexpr std::size_t kChildrenCaptured = 8;
constexpr std::size_t kChildrenCapturedPerNode = 16;
}  // namespace

HangInquiry::HangInquiry(boost::asio::io_context& io, const AgentConfig& config, const HeartbeatChannel& beats,
                         RunLayout& layout, const SupervisionPolicy& policy, Logger& log, EventLog& events, Host host)
    : io_(io),
      config_(config),
      beats_(beats),
      layout_(layout),
      policy_(policy),
      log_(log),
      events_(events),
      host_(std::move(host)),
      watch_timer_(io),
      verdict_timer_(io),
      capture_(io) {}

void HangInquiry::watch() {
  if (!beats_.enabled() || config_.hang_timeout.count() == 0) return;
  std::vector<WatchedWorker> running;
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0) {
      Beat beat = beats_.read(w.local_rank);
      if (beat.ever()) beat.time_ns = std::max(beat.time_ns, pause_end_ns_);
      const auto exempt = exempt_until_ns_.find(w.local_rank);
      running.push_back({w.local_rank, beat, std::max(round_started_ns_, pause_end_ns_),
                         exempt == exempt_until_ns_.end() ? 0 : exempt->second, handed_over_});
    }
  const std::int64_t now = monotonic_ns();
  const HangCheck check = check_hangs(running, config_.hang_timeout.count() * 1'000'000, now,
                                      config_.hang_initial_timeout.count() * 1'000'000);
  if (!check.hung.empty()) return on_hung(check.hung, now);
  if (!check.next_check_ns) return;
  // steady_clock is CLOCK_MONOTONIC, the clock the workers write.
  watch_timer_.expires_at(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(*check.next_check_ns)));
  // An expired timer's handler may already be queued when pause_watch() or start_round() cancels it: the watch
  // it belongs to is over (an in-place re-form's workers must not be judged meanwhile), so it checks its number.
  watch_timer_.async_wait([this, number = watch_number_](const boost::system::error_code& ec) {
    if (ec || number != watch_number_ || !judging()) return;
    // Late by more than a loaded loop ever is: this process did not run, and the workers may not have
    // either (a frozen machine); each gets a full timeout from now before it is judged.
    if (std::chrono::steady_clock::now() - watch_timer_.expiry() > StallClock::kStallThreshold)
      pause_end_ns_ = monotonic_ns();
    watch();
  });
}

// The one truth of "silent since" (issue 31): the worker's last beat as it happened (CLOCK_MONOTONIC), or the
// round's start for one that never beat. The log, the `hung` event, the view the verdict reads (and so the
// summary) and the live view all say this; a pause of the whole job moves only *when* a worker is judged
// (watch), never the time of its last beat.
std::int64_t HangInquiry::silent_since_ns(int local_rank) const {
  const Beat b = beats_.read(local_rank);
  return b.ever() ? b.time_ns : round_started_ns_;
}

void HangInquiry::start_round(bool handed_over) {
  round_started_ns_ = monotonic_ns();
  handed_over_ = handed_over;
  verdict_pending_ = false;
  exempt_until_ns_.clear();
  hung_.clear();  // the last round's hung ranks: the live view must not show this round's as hung
  ++watch_number_;
  watch_timer_.cancel();
}

void HangInquiry::pause_watch() {
  ++watch_number_;
  watch_timer_.cancel();
}

void HangInquiry::on_job_resumed() {
  pause_end_ns_ = monotonic_ns();
  if (!beats_.enabled() || config_.hang_timeout.count() == 0 || !judging()) return;
  watch_timer_.cancel();
  watch();
}

void HangInquiry::cancel() {
  watch_timer_.cancel();
  verdict_timer_.cancel();
  verdict_pending_ = false;
  capture_.abandon();  // stopped for another reason while capturing: the teardown takes the hung worker too
}

void HangInquiry::on_hung(std::vector<int> hung, std::int64_t now_ns) {
  // The one silent longest stopped first: this node's candidate when it must decide alone (one that never
  // beat counts from the round's start). The job-wide verdict is the rendezvous' (rendezvous/hang_verdict.hpp).
  std::sort(hung.begin(), hung.end(), [&](int a, int b) { return silent_since_ns(a) < silent_since_ns(b); });
  const std::int64_t now_ms = unix_ms();
  hung_.clear();
  for (int lr : hung) {
    const Beat beat = beats_.read(lr);
    const WorkerRecord& w = policy_.worker(lr);
    HungWorker h;
    h.local_rank = lr;
    h.step = beat.step;
    h.never_beat = !beat.ever();
    h.silent_ms = std::max<std::int64_t>(0, (now_ns - silent_since_ns(lr)) / 1'000'000);
    h.last_beat_ms = now_ms - h.silent_ms;
    hung_.push_back(h);
    if (h.never_beat)
      log_.warning("rank ", w.rank, " (pid ", w.pid, ") hung: no first heartbeat ", h.silent_ms,
                   " ms after its start; capturing the stacks of every worker");
    else
      log_.warning("rank ", w.rank, " (pid ", w.pid, ") hung: no heartbeat for ", h.silent_ms, " ms",
                   h.step >= 0 ? " after step " + std::to_string(h.step) : std::string(),
                   "; capturing the stacks of every worker");
    events_.write(event::hung(now_ms, w, host_.node_rank(), h.step, h.last_beat_ms, h.never_beat));
  }
  suspect_ = true;
  start_capture();
}

void HangInquiry::judge_not_taken_up(const std::vector<int>& local_ranks) {
  if (local_ranks.empty() || capture_.active()) return;
  on_hung(local_ranks, monotonic_ns());
  for (HungWorker& h : hung_) h.not_taken_up = true;
}

// The rendezvous asks: a worker on another node hung. This node's workers are captured and reported, so the
// verdict sees every rank, and the stacks of the rank it names exist wherever it runs.
void HangInquiry::on_capture_requested() {
  if (capture_.active()) return;  // a capture of our own is under way: its view answers too
  if (!host_.round_runs()) {
    host_.send_view({});  // nothing runs here to judge
    return;
  }
  log_.warning("a worker on another node hung: capturing the stacks of every worker here");
  hung_.clear();
  suspect_ = false;
  start_capture();
}

// Every running worker, the hung ones first: in a collective the rank at fault is often not the one whose
// silence was noticed, so the stacks of all of them are the evidence.
void HangInquiry::start_capture() {
  std::vector<CaptureTarget> targets;
  // Stopped (SIGSTOP, a debugger) before the stack tools attach and stop everything themselves.
  stopped_at_capture_.clear();
  for (const WorkerRecord& w : policy_.workers()) {
    process::ProcStat st;
    if (w.state == WorkerState::kRunning && w.pid > 0 &&
        process::read_proc_stat(std::to_string(w.pid).c_str(), st) && st.state == 'T')
      stopped_at_capture_.insert(w.local_rank);
  }
  auto add = [&](const WorkerRecord& w) {
    const FlightRecorderFiles fr = flight_recorder_files(config_.base_env, flight_recorder_prefix(w.local_rank), w.rank);
    targets.push_back({w.rank, w.local_rank, w.pid, stacks_file(w.local_rank), fr.pipe, fr.dump, fr.dump_is_ours,
                       layout_.published(fr.dump)});
  };
  // What a worker may be waiting on: its DataLoader workers, a subprocess. Native stacks, a few each, the hung
  // workers' first.
  std::vector<CaptureTarget> children;
  auto add_children = [&](const WorkerRecord& w) {
    std::size_t taken = 0;
    for (pid_t child : process::descendants_of(w.pid))
      if (taken++ < kChildrenCaptured && children.size() < kChildrenCapturedPerNode)
        children.push_back({w.rank, w.local_rank, child, "", "", "", false, "", w.pid});
  };
  for (const HungWorker& h : hung_) {
    add(policy_.worker(h.local_rank));
    add_children(policy_.worker(h.local_rank));
  }
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0 && !found_hung(w.local_rank)) {
      add(w);
      add_children(w);
    }
  targets.insert(targets.end(), children.begin(), children.end());
  stacks_path_ = hang_stacks_file();
  layout_.keep(stacks_path_);
  capture_.start(std::move(targets), stacks_path_, env_value(config_.base_env, "PATH", "/usr/bin:/bin"),
                 config_.stack_capture_limit, config_.nccl_dump_limit, [this] { on_captured(); });
}

void HangInquiry::on_captured() {
  log_.warning("stacks of every worker in ", layout_.published(stacks_path_));
  const auto dumps = capture_.nccl_dumps();
  std::vector<event::StackDumpFile> files;
  if (!dumps.empty()) {
    std::vector<int> unwritten;
    std::string where;
    for (const NcclDump& d : dumps) {
      if (!d.written) {
        unwritten.push_back(d.rank);
        continue;
      }
      layout_.keep(d.path);  // without --log-dir, kept like the stacks file; with it, copied there at the end
      files.push_back({d.rank, d.shown});
      where += (where.empty() ? "" : ", ") + ("rank " + std::to_string(d.rank) + " in " + d.shown);
      nccl_dumps_.push_back(d);
    }
    log_.warning("NCCL Flight Recorder dumps: ", where.empty() ? std::string("none") : where,
                 unwritten.empty() ? std::string() : "; asked, nothing written in time: " + rdzv::rank_list(unwritten));
  }
  events_.write(event::stacks(unix_ms(), layout_.published(stacks_path_), dumps.empty() ? nullptr : &files));
  if (!host_.round_runs()) return;  // stopped meanwhile: the teardown took them
  const rdzv::HangViewMsg mine = view();
  host_.send_view(mine);
  if (mine.suspect) await_verdict();
}

void HangInquiry::on_server_resumed() {
  if (!verdict_pending_ || capture_.active() || !host_.round_runs() || host_.outcome_known()) return;
  log_.warning("the rendezvous server came back while this node waited for a hang verdict: sending its view again");
  host_.send_view(view());
  await_verdict();
}

// The rendezvous names the rank that is behind and stops the job (on_stop_order). A server that does not answer
// (an older one, or one in trouble) must not leave the job hung: decide on this node's view.
void HangInquiry::await_verdict() {
  verdict_pending_ = true;
  verdict_timer_.expires_after(kVerdictLimit);
  verdict_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || host_.outcome_known() || !host_.round_runs()) return;
    verdict_pending_ = false;
    log_.warning("no hang verdict from the rendezvous within ", kVerdictLimit.count() / 1000,
                 " s: deciding on this node's workers alone");
    decide_alone();
  });
}

bool HangInquiry::found_hung(int local_rank) const {
  return std::any_of(hung_.begin(), hung_.end(), [&](const HungWorker& h) { return h.local_rank == local_rank; });
}

// This node's workers as the verdict compares them: step and silence of each, read now.
rdzv::HangViewMsg HangInquiry::view() const {
  rdzv::HangViewMsg out;
  out.suspect = suspect_;
  out.held = host_.round_held && host_.round_held();
  out.stacks = layout_.published(stacks_path_);
  const std::int64_t now_ns = monotonic_ns();
  for (const WorkerRecord& w : policy_.workers()) {
    if (w.state != WorkerState::kRunning || w.pid <= 0) continue;
    const Beat beat = beats_.read(w.local_rank);
    rdzv::RankBeat r;
    r.rank = w.rank;
    r.local_rank = w.local_rank;
    r.pid = w.pid;
    r.step = beat.ever() ? beat.step : -1;
    r.never_beat = !beat.ever();
    r.silent_ms = std::max<std::int64_t>(0, (now_ns - silent_since_ns(w.local_rank)) / 1'000'000);
    r.quiet = beat.quiet_until_ns > now_ns;
    if (r.quiet) r.quiet_left_ms = std::max<std::int64_t>(1, (beat.quiet_until_ns - now_ns) / 1'000'000);
    r.stopped = stopped_at_capture_.count(w.local_rank) > 0;
    r.slow = host_.named_slow(w.rank);
    // The files are in the private work tree on a local disk (never --log-dir): read on the loop, they are small.
    if (const std::string py = read_file(stacks_file(w.local_rank)); !py.empty()) {
      r.python_stack = true;
      r.collective = torch_collective_in(py);
    } else if (const std::string native = capture_.native_stacks(w.pid); !native.empty()) {
      // A C++ worker (the SDK): its native frames say whether it waits for the other ranks.
      r.python_stack = true;
      r.collective = native_collective_in(native);
    }
    // Found by this node's own watch (the initial timeout's wording needs it); not one that did not take a
    // re-formed round up, which the verdict names as never beaten in this round. One that beat since it was found
    // (its silence now shorter than then, or a first beat) has recovered: the verdict must not name it (issue 56).
    const auto found = std::find_if(hung_.begin(), hung_.end(), [&](const HungWorker& h) {
      return h.local_rank == w.local_rank && !h.not_taken_up;
    });
    if (found != hung_.end()) {
      r.hung = r.silent_ms >= found->silent_ms && !(found->never_beat && beat.ever());
      r.recovered = !r.hung;
    }
    out.ranks.push_back(r);
  }
  return out;
}

// Without the rendezvous' verdict: the hung worker(s) found here, the one silent longest as the root cause.
void HangInquiry::decide_alone() {
  std::vector<int> ranks;
  for (const HungWorker& h : hung_) ranks.push_back(h.local_rank);
  if (!host_.kill_hung(ranks) || hung_.empty()) return;
  const HungWorker& h = hung_.front();
  host_.report_hang(h.local_rank, hang_message(h.silent_ms, h.step, h.last_beat_ms, layout_.published(stacks_path_),
                                               h.never_beat));
}

// The rendezvous' stop order: when it is a hang verdict naming a rank of this node, that worker is killed
// with SIGKILL at once (it may never act on SIGTERM) and recorded as hung; the rest go down as ordered. One
// that could not tell which rank holds the others takes every silent worker here.
void HangInquiry::on_stop_order(const rdzv::Failure& root_cause) {
  verdict_timer_.cancel();
  verdict_pending_ = false;
  exempt_until_ns_.clear();
  if (!rdzv::is_hang(root_cause) || !host_.round_runs()) return;
  std::vector<int> ranks;
  if (root_cause.unsure) {
    const std::int64_t now_ns = monotonic_ns();
    for (const WorkerRecord& w : policy_.workers())
      if (w.state == WorkerState::kRunning && w.pid > 0 &&
          now_ns - silent_since_ns(w.local_rank) >= config_.hang_timeout.count() * 1'000'000)
        ranks.push_back(w.local_rank);
  } else if (root_cause.node_rank == host_.node_rank() && root_cause.local_rank >= 0 &&
             static_cast<std::size_t>(root_cause.local_rank) < policy_.workers().size()) {
    const WorkerRecord& w = policy_.worker(root_cause.local_rank);
    // This node's own measurement must support the verdict (issue 33): a rank that beat just now is alive, and
    // is not killed as hung on another node's word; it goes down with the others as the stop orders.
    const std::int64_t silent_ms = (monotonic_ns() - silent_since_ns(w.local_rank)) / 1'000'000;
    const std::int64_t confirms_ms = config_.hang_timeout.count() > 0
                                         ? std::max<std::int64_t>(rdzv::kMinConfirmedSilenceMs,
                                                                  config_.hang_timeout.count() / 2)
                                         : rdzv::kUnconfirmedWithoutTimeoutMs;
    if (w.state == WorkerState::kRunning && w.pid == root_cause.pid) {
      if (silent_ms >= confirms_ms || stopped_at_capture_.count(w.local_rank)) ranks.push_back(w.local_rank);
      else
        log_.warning("the rendezvous named rank ", w.rank, " hung, but it beat ", silent_ms,
                     " ms ago here: not confirmed, so not killed as hung (it stops with the others)");
    }
  }
  if (!ranks.empty()) host_.kill_hung(ranks);
}

// The inquiry found a declared quiet phase (a save on rank 0 while the others wait in a barrier or in the next
// backward): nobody is hung. The silent workers here are left alone for the longest bound still running; a
// phase that ends sooner beats, and everyone is judged by their beats again (agent/hang_watch.hpp).
void HangInquiry::on_deferred(const rdzv::HangDeferredMsg& m) {
  verdict_timer_.cancel();
  verdict_pending_ = false;
  hung_.clear();
  suspect_ = false;
  if (!m.recovered.empty()) {  // issue 56: the ranks found hung beat again during the capture
    log_.warning(rdzv::rank_list(m.recovered), ", found hung, beat again during the stack capture: not hung, no "
                 "verdict; the watch goes on");
    events_.write(event::hang_deferred(unix_ms(), m.quiet_ranks, m.wait_ms, m.recovered));
    if (judging()) {
      watch_timer_.cancel();
      watch();
    }
    return;
  }
  const std::int64_t now_ns = monotonic_ns();
  const std::int64_t until = now_ns + m.wait_ms * 1'000'000;
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0 && beats_.read(w.local_rank).quiet_until_ns <= now_ns)
      exempt_until_ns_[w.local_rank] = until;
  log_.warning(rdzv::rank_list(m.quiet_ranks), " inside a declared quiet phase (up to ", m.wait_ms / 1000.0,
               " s more): the ranks silent beside ", m.quiet_ranks.size() == 1 ? "it" : "them",
               " wait for ", m.quiet_ranks.size() == 1 ? "it" : "them", ", and are not hung");
  events_.write(event::hang_deferred(unix_ms(), m.quiet_ranks, m.wait_ms, {}));
  if (judging()) {
    watch_timer_.cancel();
    watch();
  }
}

// Always inside the private work tree (mkdtemp's 0700, on a local file system: agent/run_layout.hpp):
// never a predictable name in a shared directory such as /dev/shm, where another user could plant a
// symlink or a FIFO, and never on a --log-dir that may hang the loop. Without --log-dir the temporary
// tree is removed at the end except for this file (RunLayout::keep); with it, the file is copied there.
std::string HangInquiry::hang_stacks_file() const {
  return layout_.attempt_work_file(host_.attempt(), "hang_stacks.txt");
}

std::string HangInquiry::stacks_file(int local_rank) const {
  return layout_.work_dir(host_.attempt(), local_rank) + "/python_stacks.txt";
}

// Beside the Python stacks, for the same reasons: torch makes its FIFO and writes its dump there.
std::string HangInquiry::flight_recorder_prefix(int local_rank) const {
  return layout_.work_dir(host_.attempt(), local_rank) + "/" + kFlightRecorderPrefixName;
}

}  // namespace ddprun::agent
