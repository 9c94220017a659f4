// The agent's executor, shared by its source files: node_agent.cpp (set-up, reaping, teardown, finishing),
// node_agent_workers.cpp (starting workers), node_agent_rdzv.cpp (what the rendezvous says, and what this node
// tells it), node_agent_reform.cpp (re-forming in place), node_agent_end.cpp (the events file's code, the
// summary's context), and the wiring of its components: node_agent_hang.cpp (HangInquiry),
// node_agent_live_view.cpp (LiveView) and node_agent_errors.cpp (ErrorFileWatch); OutputRouting and LoopProbe
// need none. Rules live in
// supervision_policy.hpp and agent_lifecycle.hpp.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/agent_lifecycle.hpp"
#include "agent/child_reaper.hpp"
#include "agent/error_file_watch.hpp"
#include "agent/event_log.hpp"
#include "agent/exit_summary.hpp"
#include "agent/hang_inquiry.hpp"
#include "agent/heartbeat_channel.hpp"
#include "agent/live_view.hpp"
#include "agent/loop_probe.hpp"
#include "agent/output_routing.hpp"
#include "agent/rendezvous_link.hpp"
#include "agent/run_layout.hpp"
#include "agent/signal_reader.hpp"
#include "agent/stack_capture.hpp"
#include "agent/supervision_policy.hpp"
#include "agent/worker_plan.hpp"
#include "common/process/job_cgroup.hpp"
#include "common/process/job_guard.hpp"
#include "common/process/spawn.hpp"

namespace ddprun::agent {

class NodeAgent {
 public:
  explicit NodeAgent(const AgentConfig& config);
  int run();

 private:
  // node_agent_workers.cpp
  // A worker that could not be started: its exec failed (126/127) or a resource ran out (71).
  struct StartFailure {
    int local_rank = 0;
    process::ExitStatus status;
    std::string reason;
  };
  // A worker forked (process::spawn_start), its exec not yet confirmed; or the resource it could not get.
  struct StartingWorker {
    int local_rank = 0;
    struct Route {
      OutputRouting::Target target;
      int read_fd = -1;
    } routes[2];  // stdout, stderr
    process::StartedChild child;
    std::optional<StartFailure> failure;
  };
  void start_workers();
  void watch_error_files();
  std::string oom_kill_reason();
  WorkerFacts worker_facts(int local_rank, const OutputRouting::Target& stdout_target) const;
  StartingWorker begin_worker(int local_rank);
  std::optional<StartFailure> finish_worker(StartingWorker& sw);
  void signal_everything(int signal, bool include_descendants);
  // node_agent_rdzv.cpp
  rendezvous::ClientHandlers rendezvous_handlers();
  // This node cannot take part: says `why`, tells the other nodes, and returns `code` (69 by default, everywhere).
  int end_before_start(const std::string& why, int code = kExitRdzvUnavailable);
  void on_assignment(const rendezvous::Assignment& a);
  void on_stop(const rendezvous::StopOrder& order);
  void on_outcome(const JobCause* cause, const char* reason);
  rendezvous::Failure failure_of(const WorkerRecord& w) const;
  void report_worker_failure(int local_rank);
  void report_signal(int signal);
  void report_agent_signal(int signal, std::int64_t time_ms);
  void leave_after_signal(int signal);
  void begin_next_round(AgentLifecycle::Next how);
  void note_reform(const rendezvous::StopOrder& order, bool in_place);
  bool may_rejoin(const rendezvous::StopOrder& order) const;
  void rejoin_after_drop(const rendezvous::StopOrder& order);
  // node_agent_reform.cpp: re-forming in place
  bool workers_offer_reform() const;
  bool all_workers_running() const;
  bool reform_in_place(const rendezvous::StopOrder& order);
  void leave_lost_group();
  void take_reform_assignment();
  void on_reform_ack_deadline();
  void start_again_in_round();
  void reform_lost_a_worker();
  // node_agent_hang.cpp: the wiring of the hang inquiry (agent/hang_inquiry.hpp)
  HangInquiry::Host hang_host();
  // node_agent_errors.cpp: the wiring of the error-file watch (agent/error_file_watch.hpp)
  ErrorFileWatch::Host error_file_host();
  void on_raiser_still_exiting(int local_rank, const supervision::ErrorFileContents& ef);
  // node_agent_live_view.cpp: the wiring of the live view (agent/live_view.hpp)
  LiveView::Host live_view_host();
  std::string agent_state() const;
  // node_agent.cpp
  void on_signal(const ReceivedSignal& received);
  void suspend_job();
  void resume_job();
  void on_child_exit(pid_t pid, const process::ExitStatus& status);
  void after_reap(bool has_children);
  void apply(const Decision& d, const char* reason);
  void arm_grace();
  void on_grace_expired();
  void maybe_finish();
  // The job guard's liveness (node_agent.cpp): a guard that is gone is said at once and replaced.
  void start_job_guard();
  void watch_guard();
  void on_guard_gone();
  SummaryContext summary_context() const;  // what the end-of-job summary needs from this node, as it ends
  int events_exit_code(int job_code);

  const AgentConfig& config_;
  World world_;  // the launcher's, then the rendezvous' assignment
  Logger log_;
  boost::asio::io_context io_;
  SignalReader signals_;  // SIGINT, SIGTERM, SIGHUP, SIGQUIT (stop), SIGUSR1, SIGUSR2 (notices), SIGTSTP, SIGCONT
  ChildReaper reaper_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::steady_timer stop_reply_timer_;  // bounds the wait for the server's answer to our signal
  boost::asio::steady_timer peer_signal_timer_;  // SLURM: a peer's signal, before our slurmstepd's copy came
  SupervisionPolicy policy_;
  RunLayout layout_;
  EventLog events_;
  std::unordered_map<pid_t, int> local_rank_of_;
  RendezvousLink link_;
  process::JobGuard guard_;  // ends the job if this process is SIGKILLed (common/process/job_guard.hpp)
  process::JobCgroup cgroup_;  // the workers' cgroup, where one can be made (common/process/job_cgroup.hpp)
  process::OomKillCounter oom_;      // the OOM kills in the workers' memory cgroup
  long long oom_kills_seen_ = -1;    // its count at the round's start plus the kills already put on a worker
  boost::asio::posix::stream_descriptor guard_watch_;  // says when the guard is gone (watch_guard)
  OutputRouting output_;  // the workers' streams: console, log files (agent/output_routing.hpp)
  HeartbeatChannel heartbeats_;  // the workers' beats: the hang inquiry, the live view, re-forming in place
  LoopProbe probe_;  // DDPRUN_LOOP_PROBE_MS (agent/loop_probe.hpp)
  bool announcing_start_failure_ = false;  // link_.announce_start_failure runs: a stop signal ends it
  HangInquiry hang_;  // --hang-timeout (agent/hang_inquiry.hpp); after everything it reads
  LiveView live_;  // ddprun-status, --metrics-textfile, stragglers (agent/live_view.hpp); after what it reads
  ErrorFileWatch errors_;  // a worker's error file, read as it is written (agent/error_file_watch.hpp)
  // Re-forming in place (node_agent_reform.cpp).
  int workers_attempt_ = 0;  // the attempt whose files the running workers use (kept by a re-form in place)
  std::int64_t reforms_announced_ = 0;  // in-place re-forms handed to the running workers
  boost::asio::steady_timer reform_ack_timer_;  // bounds the workers' taking the new round up
  AgentLifecycle lifecycle_;  // round stage, what the round leads to, clean-up (agent/agent_lifecycle.hpp)
  std::int64_t start_ms_ = 0;
  std::vector<Attempt> attempts_;  // rounds this node ran that ended in a re-form, for the summary
};

}  // namespace ddprun::agent
