#include "agent/in_place_reform.hpp"

#include <csignal>
#include <nlohmann/json.hpp>

#include "agent/atomic_file.hpp"
#include "agent/env_contract.hpp"
#include "agent/event_kinds.hpp"
#include "common/process/process_tree.hpp"
#include "common/time.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::agent {
using nlohmann::json;

InPlaceReform::InPlaceReform(boost::asio::io_context& io, const AgentConfig& config, const World& world,
                             HeartbeatChannel& beats, SupervisionPolicy& policy, AgentLifecycle& lifecycle,
                             const RunLayout& layout, Logger& log, EventLog& events, Host host)
    : config_(config), world_(world), beats_(beats), policy_(policy), lifecycle_(lifecycle), layout_(layout),
      log_(log), events_(events), host_(std::move(host)), ack_timer_(io), meet_timer_(io), ready_timer_(io) {}

void InPlaceReform::on_workers_started() {
  announced_ = 0;
  drop_held_round();
  ready_timer_.cancel();
  ready_until_ = std::chrono::steady_clock::now() + meet_wait_;
  watch_ready(++ready_watch_);  // not now: they are registered once launched, after this call
}

void InPlaceReform::watch_ready(std::uint64_t watch) {
  ready_timer_.expires_after(std::chrono::milliseconds(10));
  ready_timer_.async_wait([this, watch](const boost::system::error_code& ec) {
    if (!ec) check_ready(watch);
  });
}

// New workers, until each can meet its peers: then round_ready, once. Every 10 ms: the few milliseconds it may
// lag are nothing next to the seconds a start takes, and the loop stays idle otherwise. Without the heartbeat
// page nothing tells: ready at once (the kept workers then wait in the group, as before). A program that never
// says so (no helper, no beat) is ready at the others' bound (meet_wait_): no poll for the rest of the job.
void InPlaceReform::check_ready(std::uint64_t watch) {
  if (watch != ready_watch_ || policy_.phase() != Phase::kRunning) return;
  bool ready = !policy_.workers().empty();
  if (beats_.enabled())
    for (const WorkerRecord& w : policy_.workers())
      if (w.state == WorkerState::kRunning && w.pid > 0 && !beats_.ready_to_meet(w.local_rank)) ready = false;
  if (!ready && std::chrono::steady_clock::now() < ready_until_) return watch_ready(watch);
  host_.report_round_ready(world_.restart_count);  // false: an older rendezvous, nobody waits for it
}

void InPlaceReform::cancel() {
  ack_timer_.cancel();
  drop_held_round();
  ready_timer_.cancel();
  ++ready_watch_;
}

void InPlaceReform::drop_held_round() {
  held_ = false;
  meet_timer_.cancel();
}

bool InPlaceReform::all_workers_running() const {
  for (const WorkerRecord& w : policy_.workers())
    if (w.state != WorkerState::kRunning || w.pid <= 0) return false;
  return !policy_.workers().empty();
}

// Every worker of this node runs and offered to take the next round up (and took every earlier one).
bool InPlaceReform::workers_offer() const {
  if (!beats_.enabled() || !all_workers_running() ||
      policy_.workers().size() != static_cast<std::size_t>(world_.local_world_size))
    return false;
  for (const WorkerRecord& w : policy_.workers())
    if (beats_.reforms_taken(w.local_rank) != announced_ + 1) return false;
  return true;
}

bool InPlaceReform::take(const rendezvous::StopOrder& order) {
  // A round held back for meet is overtaken: the next one (or the usual restart) replaces it; the workers never
  // saw it (announced_ is unchanged, so they still offer).
  drop_held_round();
  // A join says so (membership); a lost node is a failure without a rank. A worker's failure restarts.
  const bool nothing_failed = order.membership || order.root_cause.is_node_failure();
  if (lifecycle_.reforming() && nothing_failed) {  // the round being formed changed again: still in place
    log_.debug("re-form ordered again while re-forming in place: ", order.reason);
    if (!order.membership) leave_lost_group();
    return true;
  }
  if (!nothing_failed || policy_.phase() != Phase::kRunning || host_.hang_inquiring() || !workers_offer() ||
      !lifecycle_.on_reform_in_place())
    return false;
  log_.warning(order.reason, "; this node's workers stay and take the next round up in place");
  host_.note_reform(order);
  if (!order.membership) leave_lost_group();  // a node lost (a join leaves the group whole)
  host_.report_stopped();
  return true;
}

// A node of the round was lost, perhaps frozen rather than dead (issue 32: SIGSTOP of a whole node). Its peers'
// connections stay open, so the survivors would wait in a collective with it until --term-timeout and then be
// replaced, losing everything since the last checkpoint. Every collective of that group needs the lost node: the
// workers leave the group now (the helper shuts its connections down, the collective fails as if the peer had
// died) and keep their state for the next round.
// They wait for the next round without a beat from now: the hang watch waits with them (a join leaves them
// training in the old round until the hand-over, watched as ever).
void InPlaceReform::leave_lost_group() {
  for (int lr = 0; lr < world_.local_world_size; ++lr) beats_.announce_group_lost(lr, announced_ + 1);
  host_.pause_hang_watch();
}

void InPlaceReform::on_assignment() {
  if (!lifecycle_.on_reform_assignment() || policy_.phase() != Phase::kRunning || !all_workers_running())
    return lost_a_worker();
  const int attempt = host_.attempt();
  for (int lr = 0; lr < world_.local_world_size; ++lr) {
    // Written whole before the announcement: a worker never reads half a round.
    std::string text;
    for (const auto& v : round_variables(world_, lr)) text += v + "\n";
    const std::string why =
        write_file_atomically(layout_.work_dir(attempt, lr), RunLayout::kReformFileName, text, 0600);
    if (why.empty()) continue;
    // The worker cannot learn its round: it fails, and the job restarts the usual way (or ends).
    WorkerRecord& w = policy_.worker(lr);
    w.reason = "could not hand it the re-formed round: " + why;
    log_.error("rank ", w.rank, ": ", w.reason);
    process::signal_group(w.pid, SIGKILL);
  }
  // Held until every node's workers can meet: these go on training in the old round meanwhile. The rendezvous
  // judges them in the new round's numbering from now (a failure, a hang view); their output keeps the old
  // prefix until they take the round up (hand_over).
  for (int lr = 0; lr < world_.local_world_size; ++lr) policy_.worker(lr).rank = world_.rank_offset + lr;
  lifecycle_.on_reformed();
  held_ = true;
  log_.debug("round ", world_.restart_count, ": this node's workers go on until every node's can meet");
  const int round = world_.restart_count;
  meet_timer_.expires_after(meet_wait_);
  meet_timer_.async_wait([this, round](const boost::system::error_code& ec) {
    if (ec || !held_ || round != world_.restart_count) return;
    log_.info("round ", round, ": no word that every node's workers can meet within ", meet_wait_.count(),
              " ms; handing the round over anyway");
    hand_over();
  });
  if (!host_.report_round_ready(round)) hand_over();  // an older rendezvous: no meet will come
}

void InPlaceReform::on_meet(int round) {
  if (held_ && round == world_.restart_count) hand_over();
}

void InPlaceReform::hand_over() {
  // A hang found while the round was held (the workers trained on in the old one) is being judged: its verdict
  // ends or restarts the round; a hang that was not one (the rank beat again) lets the hand-over go on.
  if (held_ && host_.hang_inquiring()) {
    meet_timer_.expires_after(kInquiryRecheck);
    meet_timer_.async_wait([this, round = world_.restart_count](const boost::system::error_code& ec) {
      if (!ec && held_ && round == world_.restart_count) hand_over();
    });
    return;
  }
  drop_held_round();
  if (policy_.phase() != Phase::kRunning || !all_workers_running()) return lost_a_worker();
  ++announced_;
  for (int lr = 0; lr < world_.local_world_size; ++lr) {
    WorkerRecord& w = policy_.worker(lr);
    beats_.forget_beats(lr);  // a beat of the last round is not one of this round (as for new workers)
    beats_.announce_reform(lr, announced_);
    host_.rank_changed(lr, w.rank);
  }
  const World& w = world_;
  log_.info("re-formed in place: ", ranks_text(w), " of ", w.world_size, " (node ", w.node_rank, " of ", w.nnodes,
            "), master ", rendezvous::text::host_port(w.master_addr, w.master_port), ", attempt ", w.restart_count,
            ", the same ", w.local_world_size == 1 ? "worker" : "workers");
  events_.write(event::reformed_in_place(unix_ms(), w, announced_));
  ack_timer_.expires_after(config_.term_timeout);
  ack_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_ack_deadline();
  });
  host_.resume_hang_watch();
}

// A worker still on the last round --term-timeout after the new one was handed over: stuck in a collective with
// a peer that vanished without a reset (a machine that lost power), or a program that offered but never looks.
// Under --hang-timeout it is a hang, judged job-wide (stacks, verdict, 78 or a restart; issue 32: a SIGSTOPped
// worker stalled the re-form until here, then was replaced with no stacks and no root cause). Otherwise nothing
// failed: this node's workers are replaced by new ones in the same round, which the other nodes' workers wait
// for in init_process_group, as a restart would have replaced them (no restart of --max-restarts is used).
void InPlaceReform::on_ack_deadline() {
  if (policy_.phase() != Phase::kRunning || lifecycle_.stage() != AgentLifecycle::Stage::kRunning) return;
  std::vector<int> late;
  for (int lr = 0; lr < world_.local_world_size; ++lr) {
    const WorkerRecord& w = policy_.worker(lr);
    if (w.state != WorkerState::kRunning || w.pid <= 0 || beats_.reforms_taken(lr) > announced_) continue;
    late.push_back(lr);
    log_.warning("rank ", w.rank, " (pid ", w.pid, ") did not take the re-formed round up within ",
                 config_.term_timeout.count(), " ms (--term-timeout)");
  }
  if (late.empty()) return;
  events_.write(event::reform_not_taken(unix_ms(), world_.restart_count));
  if (config_.hang_timeout.count() > 0 && beats_.enabled()) return host_.judge_hung(late);
  lifecycle_.on_reform_not_taken();
  host_.replace_workers();
}

// A worker died (or the node began a teardown) while the round formed: the round started without it. Its
// failure is reported in the new round, where the rendezvous counts it (while a round forms, failures are the
// teardown's and ignored); the restart or the end that follows goes the usual way.
void InPlaceReform::lost_a_worker() {
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
  host_.report_worker_failure(lr);
}

}  // namespace ddprun::agent
