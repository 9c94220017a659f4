// Re-forming in place: an elastic re-form in which nothing failed (a node joined, a node was lost) keeps the
// workers of this node when every one of them offered it (common/contract/worker_contract.hpp). The node
// reports itself stopped at once; the next round's assignment is handed to the running workers (a file of
// variables, then a number in their heartbeat slot) instead of a restart. What a worker saves is its start:
// no interpreter, no import, no data set, no checkpoint to read; the model stays in memory.
//
// Anything that goes wrong falls back to what a re-form does without it: a worker that does not take the new
// round up within --term-timeout is replaced by a new one in the same round (as a restart would have replaced it);
// a worker that dies while the round forms is a worker failure of the new round (the rendezvous restarts the job
// under --max-restarts, or ends it).
#include <csignal>
#include <nlohmann/json.hpp>

#include "agent/atomic_file.hpp"
#include "agent/env_contract.hpp"
#include "agent/node_agent_impl.hpp"
#include "common/process/process_tree.hpp"
#include "common/time.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::agent {
using nlohmann::json;

// Every worker of this node runs and offered to take the next round up (and took every earlier one).
bool NodeAgent::workers_offer_reform() const {
  if (!heartbeats_.enabled() || !all_workers_running() ||
      policy_.workers().size() != static_cast<std::size_t>(world_.local_world_size))
    return false;
  for (const WorkerRecord& w : policy_.workers())
    if (heartbeats_.reforms_taken(w.local_rank) != reforms_announced_ + 1) return false;
  return true;
}

bool NodeAgent::reform_in_place(const rendezvous::StopOrder& order) {
  // A join says so (membership); a lost node is a failure without a rank. A worker's failure restarts.
  const bool nothing_failed = order.membership || order.root_cause.is_node_failure();
  if (lifecycle_.reforming() && nothing_failed) {  // the round being formed changed again: still in place
    log_.debug("re-form ordered again while re-forming in place: ", order.reason);
    if (!order.membership) leave_lost_group();
    return true;
  }
  if (!nothing_failed || policy_.phase() != Phase::kRunning || hang_.inquiring() || !workers_offer_reform() ||
      !lifecycle_.on_reform_in_place())
    return false;
  log_.warning(order.reason, "; this node's workers stay and take the next round up in place");
  note_reform(order, /*in_place=*/true);
  if (!order.membership) leave_lost_group();  // a node lost (a join leaves the group whole)
  hang_.pause_watch();  // until the next round, the workers may wait for it: nobody's silence
  link_.client().report_stopped();
  return true;
}

// A node of the round was lost, perhaps frozen rather than dead (issue 32: SIGSTOP of a whole node). Its peers'
// connections stay open, so the survivors would wait in a collective with it until --term-timeout and then be
// replaced, losing everything since the last checkpoint. Every collective of that group needs the lost node: the
// workers leave the group now (the helper shuts its connections down, the collective fails as if the peer had
// died) and keep their state for the next round.
void NodeAgent::leave_lost_group() {
  for (int lr = 0; lr < world_.local_world_size; ++lr) heartbeats_.announce_group_lost(lr, reforms_announced_ + 1);
}

// The assignment of a round this node re-forms into in place.
void NodeAgent::take_reform_assignment() {
  if (!lifecycle_.on_reform_assignment() || policy_.phase() != Phase::kRunning || !all_workers_running())
    return reform_lost_a_worker();
  for (int lr = 0; lr < world_.local_world_size; ++lr) {
    // Written whole before the announcement: a worker never reads half a round.
    std::string text;
    for (const auto& v : round_variables(world_, lr)) text += v + "\n";
    const std::string why = write_file_atomically(layout_.work_dir(workers_attempt_, lr), RunLayout::kReformFileName,
                                                  text, 0600);
    if (why.empty()) continue;
    // The worker cannot learn its round: it fails, and the job restarts the usual way (or ends).
    WorkerRecord& w = policy_.worker(lr);
    w.reason = "could not hand it the re-formed round: " + why;
    log_.error("rank ", w.rank, ": ", w.reason);
    process::signal_group(w.pid, SIGKILL);
  }
  ++reforms_announced_;
  for (int lr = 0; lr < world_.local_world_size; ++lr) {
    WorkerRecord& w = policy_.worker(lr);
    w.rank = world_.rank_offset + lr;
    heartbeats_.forget_beats(lr);  // a beat of the last round is not one of this round (as for new workers)
    heartbeats_.announce_reform(lr, reforms_announced_);
    output_.set_rank(lr, w.rank);
  }
  lifecycle_.on_reformed();
  hang_.start_round();
  live_.on_ranks_changed();
  const World& w = world_;
  log_.info("re-formed in place: ", ranks_text(w), " of ",
            w.world_size, " (node ", w.node_rank, " of ", w.nnodes, "), master ", rendezvous::text::host_port(w.master_addr, w.master_port),
            ", attempt ", w.restart_count, ", the same ", w.local_world_size == 1 ? "worker" : "workers");
  events_.write(json{{"event", "reformed_in_place"}, {"time_ms", unix_ms()}, {"node_rank", w.node_rank},
                     {"rank_offset", w.rank_offset}, {"world_size", w.world_size}, {"restart_count", w.restart_count},
                     {"reforms", reforms_announced_}});
  reform_ack_timer_.expires_after(config_.term_timeout);
  reform_ack_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_reform_ack_deadline();
  });
  hang_.watch();
}

bool NodeAgent::all_workers_running() const {
  for (const WorkerRecord& w : policy_.workers())
    if (w.state != WorkerState::kRunning || w.pid <= 0) return false;
  return !policy_.workers().empty();
}

// A worker still on the last round --term-timeout after the new one was handed over: stuck in a collective with
// a peer that vanished without a reset (a machine that lost power), or a program that offered but never looks.
// Under --hang-timeout it is a hang, judged job-wide (stacks, verdict, 78 or a restart). Otherwise nothing
// failed: this node's workers are replaced by new ones in the same round, which the other nodes' workers
// wait for in init_process_group, as a restart would have replaced them (no restart of --max-restarts is used).
// SIGKILL at once: each had --term-timeout already.
void NodeAgent::on_reform_ack_deadline() {
  if (policy_.phase() != Phase::kRunning || lifecycle_.stage() != AgentLifecycle::Stage::kRunning) return;
  std::vector<int> late;
  for (int lr = 0; lr < world_.local_world_size; ++lr) {
    const WorkerRecord& w = policy_.worker(lr);
    if (w.state != WorkerState::kRunning || w.pid <= 0 || heartbeats_.reforms_taken(lr) > reforms_announced_) continue;
    late.push_back(lr);
    log_.warning("rank ", w.rank, " (pid ", w.pid, ") did not take the re-formed round up within ",
                 config_.term_timeout.count(), " ms (--term-timeout)");
  }
  if (late.empty()) return;
  events_.write(json{{"event", "reform_not_taken"}, {"time_ms", unix_ms()}, {"restart_count", world_.restart_count}});
  // Under --hang-timeout a worker that did not take the round up is hung (issue 32: a SIGSTOPped worker stalled
  // the re-form until here, then was replaced with no stacks and no root cause): judged job-wide like any hang.
  if (config_.hang_timeout.count() > 0 && heartbeats_.enabled()) return hang_.judge_not_taken_up(late);
  lifecycle_.on_reform_not_taken();
  Decision d = policy_.on_external_stop(unix_ms());
  d.signal_all = SIGKILL;
  apply(d, "a worker did not take the re-formed round up; this node's workers start again in the same round");
  maybe_finish();
}

// The old workers are gone (begin_next_round): new ones in the round the rendezvous formed, without asking it.
void NodeAgent::start_again_in_round() {
  layout_.prepare_attempt(world_.restart_count, world_.local_world_size);
  lifecycle_.on_workers_started();
  start_workers();
}

// A worker died (or the node began a teardown) while the round formed: the round started without it. Its
// failure is reported in the new round, where the rendezvous counts it (while a round forms, failures are
// the teardown's and ignored); the restart or the end that follows goes the usual way.
void NodeAgent::reform_lost_a_worker() {
  if (policy_.stop_signal() != 0) return;  // a signal stopped this node: its report went out (report_signal)
  const WorkerRecord* lost = policy_.root_cause();
  for (const WorkerRecord& w : policy_.workers())
    if (!lost && (w.state != WorkerState::kRunning || w.pid <= 0)) lost = &w;
  if (!lost) return;
  const int lr = lost->local_rank;
  WorkerRecord& w = policy_.worker(lr);
  w.rank = world_.rank_offset + lr;
  if (w.reason.empty()) w.reason = "it ended while the job re-formed in place";
  log_.error("rank ", w.rank, ": ", w.reason, " (", w.status.describe(), ")");
  report_worker_failure(lr);
}

}  // namespace ddprun::agent
