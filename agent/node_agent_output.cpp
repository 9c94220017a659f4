// The agent's output side: ddprun's console (common/console.hpp) and the workers' streams waiting for it,
// log and events files that cannot be written, and what of the output was lost, for the summary.
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/node_agent_impl.hpp"
#include "common/console.hpp"
#include "common/process/wait_status.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace {
// After every process is gone the pipes reach end of file at once; this only bounds the wait for a
// writer that escaped through fd passing to a process outside our tree.
constexpr std::chrono::seconds kDrainLimit{2};
}  // namespace
using nlohmann::json;

// What ddprun writes last (the summary) reaches a console that stalls once it drains; a stop signal
// (Ctrl-C, SIGTERM) gives up on it: the job is over and its exit code settled.
void NodeAgent::drain_console() {
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig = 1; sig < NSIG; ++sig)
    if (is_stop_signal(sig)) sigaddset(&stops, sig);
  if (console::drain(stops)) return;
  events_.write(json{{"event", "console_abandoned"}, {"time_ms", unix_ms()},
                     {"lost_bytes", console::stats(1).lost_bytes + console::stats(2).lost_bytes}});
}

// An events file that could not be written all through is exit code 73 (README "Exit codes") when the job
// itself succeeded; a failed job keeps its root cause's code, and the summary says what the file lacks.
int NodeAgent::events_exit_code(int job_code) {
  if (!events_.failed()) return job_code;
  const std::string what = "the events file " + config_.events_file + " is incomplete: writing it failed (" +
                           std::strerror(events_.failed_errno()) + ") after " +
                           std::to_string(events_.bytes_written()) + " bytes";
  if (job_code != 0) {
    log_.error(what, "; the exit code stays the job's (", job_code, ")");
    return job_code;
  }
  console::write(2, "ddprun: error: " + what + "; exit code " + std::to_string(kExitCantCreate) + "\n");
  return kExitCantCreate;
}

void NodeAgent::on_log_file_failure(int rank, const FileWriteFailure& f) {
  const std::string what = "rank " + std::to_string(rank) + "'s " + f.path + " stopped at " +
                           std::to_string(f.bytes_written) + " bytes: " + std::strerror(f.error);
  log_.error("cannot write a log file: ", what, "; the file is closed, the job goes on (the console still shows "
             "what it was shown)");
  events_.write(json{{"event", "log_write_failed"}, {"time_ms", unix_ms()}, {"rank", rank}, {"path", f.path},
                     {"errno", f.error}, {"error", std::strerror(f.error)}, {"bytes_written", f.bytes_written}});
  output_losses_.push_back(what);
}

void NodeAgent::arm_loop_probe() {
  probe_timer_.expires_after(probe_period_);
  probe_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || lifecycle_.finished()) return;
    probe_max_late_ = std::max<std::chrono::nanoseconds>(probe_max_late_,
                                                         std::chrono::steady_clock::now() - probe_timer_.expiry());
    arm_loop_probe();
  });
}

void NodeAgent::resume_console_waiters() {
  // Every pump that stopped reading because the console was congested reads again; one that finds it
  // congested at once waits again (in this list).
  std::vector<OutputPump*> waiting;
  waiting.swap(pump_scratch_.waiting_for_console);
  for (OutputPump* p : waiting) p->resume();
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
                     ": " + std::to_string(st.lost_lines) + " lines (" + std::to_string(st.lost_bytes) +
                     " bytes) not shown" + (layout_.temporary() ? "" : "; files under --log-dir keep what was teed"));
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
      if (p->waiting_for_console()) {
        console_waits = true;
        continue;
      }
      log_.warning("worker output still open ", kDrainLimit.count(), " s after every process ended; closing it");
      p->abandon();
    }
    if (console_waits) arm_drain_limit();
  });
}

bool NodeAgent::any_pump_waiting_for_console() const {
  auto waiting = [](const auto& p) { return p->waiting_for_console(); };
  return std::any_of(pumps_.begin(), pumps_.end(), waiting) ||
         std::any_of(retired_pumps_.begin(), retired_pumps_.end(), waiting);
}

void NodeAgent::abandon_console_output(int signal) {
  log_.warning(process::signal_name(signal), " while waiting for the console to drain: the rest of the "
               "workers' output is not shown");
  console::abandon_stalled();
  for (auto* list : {&pumps_, &retired_pumps_})
    for (auto& p : *list)
      if (p->waiting_for_console()) p->abandon();
}

}  // namespace ddprun::agent
