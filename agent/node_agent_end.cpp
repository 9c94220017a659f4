// What the end-of-job summary is made from on this node (agent/exit_summary.hpp).
#include "agent/node_agent_impl.hpp"
#include "common/time.hpp"

namespace ddprun::agent {

SummaryContext NodeAgent::summary_context() const {
  SummaryContext ctx;
  ctx.host = config_.host;
  ctx.node_rank = world_.node_rank;
  ctx.start_ms = start_ms_;
  ctx.end_ms = unix_ms();
  ctx.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                         started_).count();
  ctx.log_root = layout_.temporary() ? std::string() : layout_.root();
  ctx.error_file_of = [this](int lr) { return layout_.error_file(workers_attempt_, lr); };
  ctx.shown_path = [this](const std::string& p) { return layout_.published(p); };
  ctx.worker_dir_of = [this](int lr) { return layout_.worker_dir(workers_attempt_, lr); };
  ctx.stderr_tail_of = [this](int lr) { return output_.stderr_tail(lr); };
  ctx.python = config_.python;
  ctx.python_origin = config_.python_origin;
  ctx.local_rank_arg = config_.local_rank_arg;
  ctx.use_env = config_.use_env;
  ctx.stdin_rank = config_.stdin_rank;
  ctx.attempts = attempts_;
  ctx.output_losses = output_.losses();
  for (const NcclDump& d : hang_.nccl_dumps()) ctx.nccl_dumps.push_back({d.rank, d.shown});
  return ctx;
}

}  // namespace ddprun::agent
