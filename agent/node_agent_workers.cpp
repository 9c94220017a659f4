// A round's workers, as this agent owns them: started (agent/worker_launcher.hpp forks them), registered with
// the policy, the reaper's map, the job guard and the events file, and signalled.
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "agent/node_agent_impl.hpp"
#include "common/process/process_tree.hpp"
#include "common/time.hpp"
#include "common/timeouts.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::agent {
using nlohmann::json;

namespace {
// "started 4 workers: ranks 0-3 of 8 (node 0 of 2), master …, run id …, attempt 0"; "3 of 4" when one failed.
std::string started_line(const World& w, std::size_t started) {
  const std::string how_many = started == static_cast<std::size_t>(w.local_world_size)
                                   ? std::to_string(started)
                                   : std::to_string(started) + " of " + std::to_string(w.local_world_size);
  return "started " + how_many + (w.local_world_size == 1 ? " worker" : " workers") + ": " + ranks_text(w) +
         " of " + std::to_string(w.world_size) + " (node " + std::to_string(w.node_rank) + " of " +
         std::to_string(w.nnodes) + "), master " + rendezvous::text::host_port(w.master_addr, w.master_port) +
         ", run id " + w.run_id + ", attempt " + std::to_string(w.restart_count);
}
}  // namespace

void NodeAgent::start_workers() {
  const World& w = world_;
  // Logged when workers start, not while the command line is read: a refused command line stays one line.
  if (!config_.python.empty() && w.restart_count == 0)
    log_.info("Python interpreter: ", config_.python, " (", config_.python_origin, ")");
  if (heartbeats_.enabled()) heartbeats_.clear();  // no beat of a previous round counts in this one
  workers_attempt_ = w.restart_count;
  reform_.on_workers_started();
  hang_.start_round();
  watch_error_files();
  containment_.on_round_start();
  const WorkerLauncher::Round round = launcher_.launch();
  for (std::size_t lr = 0; lr < round.pids.size(); ++lr) register_worker(static_cast<int>(lr), round.pids[lr]);
  // The first worker that could not be started is handled once the line saying what started is out, so the log
  // reads in order: started, why one did not, tearing down.
  const std::size_t started = round.started();
  log_.info(started_line(w, started));
  if (const auto& failed = round.failed) {
    WorkerRecord& r = policy_.worker(failed->local_rank);
    log_.error("rank ", r.rank, " could not be started: ", failed->reason);
    r.reason = failed->reason;
    const Decision d = policy_.on_exit(failed->local_rank, failed->status, unix_ms());
    if (d.teardown_began) reports_.worker_failed(failed->local_rank);
    for (const WorkerLauncher::StartFailure& f : round.more) {  // victims of the first: the teardown began with it
      policy_.worker(f.local_rank).reason = f.reason;
      policy_.on_exit(f.local_rank, f.status, unix_ms());
    }
    apply(d, "worker_failed");
  }
  // Not one worker could start (out of descriptors, processes, memory): no exit will ever be reaped, so the
  // round's end is looked for now, once this handler is done.
  if (started == 0) boost::asio::post(io_, [this] { reaper_.reap_now(); });
  hang_.watch();
}

// One worker begun by the launcher (pid 0: it did not start; start_workers reports why).
void NodeAgent::register_worker(int local_rank, pid_t pid) {
  const int rank = world_.rank_offset + local_rank;
  const std::int64_t now = unix_ms();
  policy_.add_worker(rank, local_rank, pid, now);
  if (pid <= 0) return;
  local_rank_of_[pid] = local_rank;
  containment_.watch_group(pid);  // spawn made the worker its group's leader
  log_.debug("rank ", rank, " started, pid ", pid);
  events_.write(event::started(now, rank, local_rank, pid, world_.node_rank));
}

// The old workers are gone (begin_next_round after a re-form not taken up): new ones in the round the
// rendezvous formed, without asking it.
void NodeAgent::start_again_in_round() {
  layout_.prepare_attempt(world_.restart_count, world_.local_world_size);
  lifecycle_.on_workers_started();
  start_workers();
}

// The round's error files (agent/error_file_watch.hpp), watched from kErrorFileWatchDelay on: a file written
// before then is read when the watch begins.
void NodeAgent::watch_error_files() {
  std::vector<std::string> files;
  for (int lr = 0; lr < world_.local_world_size; ++lr) files.push_back(layout_.error_file(workers_attempt_, lr));
  errors_.watch(files, timeouts::kErrorFileWatchDelay);
}

}  // namespace ddprun::agent
