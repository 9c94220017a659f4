// The rules of one node's job, apart from doing them: a pure state machine fed with events (a worker
// exited, a signal reached ddprun, the grace period ran out) and the time, answering with what to do.
// One policy for every supervisor of workers: the node agent (agent/node_agent.cpp) and the worker SDK's
// embedded spawn (worker_sdk/spawn.cpp) apply its decisions to real processes; tests/agent/ checks every
// rule alone. libc-only (it is compiled into ddprun_process, which the SDK builds standalone too).
#pragma once

#include "common/exit_codes.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/process/wait_status.hpp"

namespace ddprun::supervision {

// A worker's lifecycle:
//   kRunning ── exits 0 ───────────────────────────────▶ kSucceeded
//   kRunning ── non-zero / signal, job still running ──▶ kFailed   (the earliest is the root cause)
//   kRunning ── non-zero / signal, after teardown began ▶ kVictim   (killed by, or during, the teardown)
// A worker that exits 0 during the teardown is kSucceeded: it finished before the stop reached it.
enum class WorkerState { kRunning, kSucceeded, kFailed, kVictim };
const char* to_string(WorkerState state);

struct WorkerRecord {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  std::int64_t start_ms = 0;
  WorkerState state = WorkerState::kRunning;
  process::ExitStatus status;
  std::int64_t end_ms = 0;
  std::string error_message;  // from the worker's error file, when it wrote one
  // What the supervisor learnt of its end beyond the status, one sentence: why it could not be started
  // (pid 0), or that the kernel's OOM killer sent its SIGKILL. Empty: nothing more is known.
  std::string reason;
  bool hung = false;          // silent for --hang-timeout after beating: killed by ddprun (kFailed)
  // Wrote a whole error file while running (on_error_file): failed then, with code 1; its exit only ends it.
  bool raised = false;
};

// The job on this node:
//   kRunning ── first failure, or a stop signal ──▶ kStopping (stop signal sent to every worker group)
//   kStopping ── grace expired, or a second SIGINT/SIGQUIT ──▶ kKilling (SIGKILL sent)
//   kStopping ── SIGTERM/SIGHUP ──▶ kStopping (not forwarded again: one SIGTERM per process per teardown)
//   any ── every worker exited ──▶ the agent reaps stragglers and finishes (phase stays as it was)
enum class Phase { kRunning, kStopping, kKilling };

// In a SLURM job (set_preemption_exit), a job preempted and stopped cleanly exits kExitPreempted
// (common/exit_codes.hpp, 79): a batch script requeues on it (README "Exit codes").

// SIGINT, SIGTERM, SIGHUP, SIGQUIT: the signals that stop a job (others, like SIGUSR1, are only notices).
bool is_stop_signal(int signal);

// What the executor must do after an event. signal_all == 0: send nothing.
struct Decision {
  int signal_all = 0;        // send to every worker's process group and every descendant
  bool arm_grace = false;    // start the --term-timeout timer; on expiry call on_grace_expired
  bool teardown_began = false;
};

// The job's root cause as the rendezvous decided it: the earliest failure on any node (the same on every
// node), or this node's own trouble with the rendezvous (refused, timed out, lost the server).
struct JobCause {
  std::string text;      // one line: "rank 3 (local rank 1, node 1, host gpu7, pid 42) exited with code 1"
  int exit_code = 1;     // what ddprun exits with on every node
  int node_rank = -1;    // where it happened; -1: not a worker
  int rank = -1;         // the failed worker's global rank; -1: a node or the rendezvous
  std::string error;     // the worker's error file, if any
  std::int64_t time_ms = 0;
};

// The cause is a node's ddprun stopped by SIGTERM (or preempted), not a failure: another node's scancel, time
// limit, preemption, or SLURM's end of a job for a node failure (agent/slurm_end_query.hpp tells them apart).
bool is_stop_of_a_node(const JobCause& cause);

class SupervisionPolicy {
 public:
  void add_worker(int rank, int local_rank, pid_t pid, std::int64_t now_ms);

  // A worker (by local rank) exited with `status` at `now_ms`.
  Decision on_exit(int local_rank, const process::ExitStatus& status, std::int64_t now_ms);
  // ddprun itself received `signal`.
  Decision on_signal(int signal, std::int64_t now_ms);
  // A worker stopped beating for --hang-timeout (agent/hang_watch.hpp): it is a failure like an exit (the
  // root cause when first), and the executor SIGKILLs it before the decision's signal reaches the rest.
  // Its exit, whatever it is, keeps it kFailed.
  Decision on_hung(int local_rank, std::int64_t now_ms);
  // A running worker wrote a whole error file and is still exiting after its grace (agent/error_file_watch.hpp):
  // an exception left its @record entry point, and what is left is its interpreter's exit with code 1 (~1 s for
  // a process group's destructor, atexit and thread joins: issue 35). The failure is known now: recorded as that
  // exit (code 1, at `now_ms`; the root cause when first) and the teardown begins. Its real exit, whatever it is,
  // keeps it so. Nothing while the job is already stopping (its exit makes it a victim, as any other).
  Decision on_error_file(int local_rank, std::int64_t now_ms);
  Decision on_grace_expired(std::int64_t now_ms);
  // Stop requested from outside the node (another node failed): like a failure elsewhere.
  Decision on_external_stop(std::int64_t now_ms);
  // The job is over for a reason decided beyond this node: tears down like an external stop (when still
  // running) and makes `cause` the summary's root cause and the exit code's source. The latest call wins:
  // the rendezvous' word replaces this node's own view of which failure came first.
  Decision on_job_cause(JobCause cause, std::int64_t now_ms);
  const std::optional<JobCause>& job_cause() const { return job_cause_; }

  // A restart round: every worker of this attempt is down; forget them and run again. Signals that
  // stopped ddprun itself are never restarted (the rendezvous only restarts after worker failures).
  void reset_for_restart();

  // Whether `status`, a worker's end about to be reported by on_exit, is a SIGKILL this policy did not ask
  // for: not a hung worker's, not after the grace period or a second Ctrl-C. Such a kill came from outside
  // the job (the kernel's OOM killer, a user, a scheduler): the executor may find out which.
  bool killed_from_outside(int local_rank, const process::ExitStatus& status) const;

  bool all_exited() const;
  Phase phase() const { return phase_; }
  const std::vector<WorkerRecord>& workers() const { return workers_; }
  WorkerRecord& worker(int local_rank);
  const WorkerRecord& worker(int local_rank) const;
  // The earliest failure on this node, if any.
  const WorkerRecord* root_cause() const;
  // The signal that stopped the job from outside (0: none).
  int stop_signal() const { return stop_signal_; }
  std::int64_t teardown_ms() const { return teardown_ms_; }
  // The job cause's code when there is one; else 0 when every worker succeeded; the root cause's code (128+N for a signal); 128+N when ddprun was
  // stopped by signal N before any worker failed; 1 for an external stop with no local cause;
  // kExitPreempted when a notice or SIGTERM came and every worker then exited 0.
  int exit_code() const;
  // A notice or SIGTERM came, and every worker then exited 0 (kExitPreempted).
  bool preempted() const;
  // A notice reached this node's running workers (what its done tells the rendezvous).
  bool noticed() const { return notice_received_; }
  // Every node's workers exited 0 and the rendezvous says whether a notice reached some node's running workers
  // first: the job's word replaces this node's own (issue 54: a notice reaching the nodes at different moments
  // made them end a completed job 0 and 79).
  void on_job_complete(bool noticed) { notice_received_ = noticed; }
  // Whether preempted() can be true at all: in a batch scheduler's job (SLURM), where requeueing is the answer.
  // Elsewhere a notice stays only a notice (exit 0) and SIGTERM gives 128+15.
  void set_preemption_exit(bool on) { preemption_exit_ = on; }

 private:
  Decision begin_teardown(int signal, std::int64_t now_ms);

  std::vector<WorkerRecord> workers_;  // indexed by local rank
  Phase phase_ = Phase::kRunning;
  int root_cause_ = -1;
  int stop_signal_ = 0;
  bool preemption_exit_ = false;
  bool notice_received_ = false;  // a SIGUSR1/SIGUSR2 reached ddprun: a clean exit now means preempted
  bool external_stop_ = false;
  std::int64_t teardown_ms_ = 0;
  std::optional<JobCause> job_cause_;
};

}  // namespace ddprun::supervision
