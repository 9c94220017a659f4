// The agent's executor, shared by its source files: node_agent.cpp (set-up, reaping, teardown, finishing),
// node_agent_workers.cpp (a round's workers: started, signalled), node_agent_rdzv.cpp (what the rendezvous says,
// and what this node tells it), node_agent_end.cpp (the events file's code, the summary's context), and
// node_agent_wiring.cpp, the wiring of its components: HangInquiry, LiveView, ErrorFileWatch, InPlaceReform and
// WorkerLauncher (OutputRouting, LoopProbe, JobContainment and JobSweep need none). Rules live in supervision_policy.hpp
// and agent_lifecycle.hpp.
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
#include "agent/event_kinds.hpp"
#include "agent/event_log.hpp"
#include "agent/exit_summary.hpp"
#include "agent/failure_reports.hpp"
#include "agent/hang_inquiry.hpp"
#include "agent/in_place_reform.hpp"
#include "agent/heartbeat_channel.hpp"
#include "agent/job_containment.hpp"
#include "agent/job_sweep.hpp"
#include "agent/live_view.hpp"
#include "agent/loop_probe.hpp"
#include "agent/output_routing.hpp"
#include "agent/peer_signal_wait.hpp"
#include "agent/rendezvous_link.hpp"
#include "agent/run_layout.hpp"
#include "agent/signal_reader.hpp"
#include "agent/slurm_end_query.hpp"
#include "agent/stack_capture.hpp"
#include "agent/supervision_policy.hpp"
#include "agent/worker_launcher.hpp"

namespace ddprun::agent {

class NodeAgent {
 public:
  explicit NodeAgent(const AgentConfig& config);
  int run();

 private:
  // node_agent_workers.cpp
  void start_workers();
  void start_again_in_round();
  void register_worker(int local_rank, pid_t pid);
  void watch_error_files();
  // node_agent_rdzv.cpp
  rendezvous::ClientHandlers rendezvous_handlers();
  // This node cannot take part: says `why`, tells the other nodes, and returns `code` (69 by default, everywhere).
  int end_before_start(const std::string& why, int code = kExitRdzvUnavailable);
  void on_assignment(const rendezvous::Assignment& a);
  void on_stop(const rendezvous::StopOrder& order);
  void on_outcome(const JobCause* cause, const char* reason);
  // A host elected in etcd whose verdict was not the job's (RendezvousLink::finish): the recorded end, or 74.
  void on_end_in_etcd(const EndInEtcd& end);
  void begin_next_round(AgentLifecycle::Next how);
  void note_reform(const rendezvous::StopOrder& order, bool in_place);
  bool may_rejoin(const rendezvous::StopOrder& order) const;
  void rejoin_after_drop(const rendezvous::StopOrder& order, bool fenced = false);
  void fence_round(const std::string& lost_why);  // agent/round_fence.hpp
  // node_agent_wiring.cpp: what each component may ask of this node, and how its decisions are carried out
  HangInquiry::Host hang_host();
  ErrorFileWatch::Host error_file_host();
  void on_raiser_still_exiting(int local_rank, const supervision::ErrorFileContents& ef);
  LiveView::Host live_view_host();
  InPlaceReform::Host reform_host();
  FailureReports::Host reports_host();
  WorkerLauncher::Host launcher_host();
  // node_agent.cpp
  void on_signal(const ReceivedSignal& received);
  void on_child_exit(pid_t pid, const process::ExitStatus& status);
  void after_reap(bool has_children);
  void apply(const Decision& d, const char* reason);
  void maybe_finish();
  void release();  // the cgroup, the run's files, the guard: last, however the job ended here
  // SLURM stopped the step (its SIGTERM here, or another node's): ask slurmctld whether for a node failure.
  void ask_slurm_why_stopped();
  SummaryContext summary_context() const;  // what the end-of-job summary needs from this node, as it ends

  const AgentConfig& config_;
  World world_;  // the launcher's, then the rendezvous' assignment
  Logger log_;
  boost::asio::io_context io_;
  SignalReader signals_;  // SIGINT, SIGTERM, SIGHUP, SIGQUIT (stop), SIGUSR1, SIGUSR2 (notices), SIGTSTP, SIGCONT
  ChildReaper reaper_;
  PeerSignalWait peer_signal_;  // SLURM: a peer's signal, before our slurmstepd's copy came (peer_signal_wait.hpp)
  SupervisionPolicy policy_;
  RunLayout layout_;
  EventLog events_;
  std::unordered_map<pid_t, int> local_rank_of_;
  RendezvousLink link_;
  JobContainment containment_;  // the job guard, the workers' cgroup, its OOM kills (agent/job_containment.hpp)
  OutputRouting output_;  // the workers' streams: console, log files (agent/output_routing.hpp)
  HeartbeatChannel heartbeats_;  // the workers' beats: the hang inquiry, the live view, re-forming in place
  LoopProbe probe_;  // DDPRUN_LOOP_PROBE_MS (agent/loop_probe.hpp)
  bool announcing_start_failure_ = false;  // link_.announce_start_failure runs: a stop signal ends it
  HangInquiry hang_;  // --hang-timeout (agent/hang_inquiry.hpp); after everything it reads
  LiveView live_;  // ddprun-status, --metrics-textfile, stragglers (agent/live_view.hpp); after what it reads
  ErrorFileWatch errors_;  // a worker's error file, read as it is written (agent/error_file_watch.hpp)
  int workers_attempt_ = 0;  // the attempt whose files the running workers use (kept by a re-form in place)
  AgentLifecycle lifecycle_;  // round stage, what the round leads to, clean-up (agent/agent_lifecycle.hpp)
  JobSweep sweep_;  // the signals to the job's processes, the grace period (agent/job_sweep.hpp)
  InPlaceReform reform_;  // keeps this node's workers through a re-form (agent/in_place_reform.hpp)
  WorkerLauncher launcher_;  // forks a round's workers (agent/worker_launcher.hpp)
  FailureReports reports_;  // what this node tells the rendezvous of its failures (agent/failure_reports.hpp)
  std::int64_t start_ms_ = 0;  // Unix ms: the live view's and the summary's clock times
  std::chrono::steady_clock::time_point started_;  // the summary's durations
  std::vector<Attempt> attempts_;  // rounds this node ran that ended in a re-form, for the summary
  SlurmEndQuery slurm_end_;  // a node failure behind SLURM's SIGTERM, not a preemption (agent/slurm_end_query.hpp)
  std::optional<JobCause> slurm_cause_;  // slurmctld's answer: the job's cause, whatever the rendezvous says later
};

}  // namespace ddprun::agent
