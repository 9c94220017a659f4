// The end of the job on this node: the events file's exit code, and what the end-of-job summary is made from
// (agent/exit_summary.hpp).
#include <cstring>

#include "agent/node_agent_impl.hpp"
#include "common/console.hpp"
#include "common/counted.hpp"

namespace ddprun::agent {

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
  ctx.stderr_tail_of = [this](int lr) { return output_.stderr_tail(lr); };
  ctx.python = config_.python;
  ctx.python_origin = config_.python_origin;
  ctx.local_rank_arg = config_.local_rank_arg;
  ctx.local_rank_arg_detected = config_.local_rank_arg_detected;
  ctx.stdin_rank = config_.stdin_rank;
  ctx.attempts = attempts_;
  ctx.output_losses = output_.losses();
  for (const NcclDump& d : hang_.nccl_dumps()) ctx.nccl_dumps.push_back({d.rank, d.shown});
  return ctx;
}

}  // namespace ddprun::agent
