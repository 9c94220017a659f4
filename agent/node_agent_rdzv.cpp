// The agent's side of the rendezvous: the assignment starts the workers; a local failure is reported so
// that every node stops; the server's stop order (or losing the server) tears this node down with the
// job's root cause, the same on every node.
#include <algorithm>
#include <unistd.h>

#include <csignal>
#include <optional>
#include <nlohmann/json.hpp>

#include "agent/node_agent_impl.hpp"
#include "agent/round_fence.hpp"
#include "common/console.hpp"
#include "common/error.hpp"
#include "common/process/wait_status.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace rdzv = ddprun::rendezvous;
using nlohmann::json;

namespace {
JobCause cause_of(const rdzv::Failure& f) {
  JobCause c;
  c.text = rdzv::describe(f);
  c.exit_code = rdzv::exit_status_of(f);
  c.node_rank = f.node_rank;
  c.rank = f.rank;
  c.error = f.error_file_contents;
  c.time_ms = f.time_unix_ms;
  return c;
}

// Issue 53: a host cut off with a minority etcd member judged the other nodes lost and ended naming one of them,
// while the others elected a new host that named this one: two root causes. Its verdict is only the job's once
// etcd holds it; otherwise the end the new host recorded is, or this node says it cannot know (74). nullopt:
// nothing changes.
std::optional<JobCause> cause_of(const EndInEtcd& end, const Logger& log) {
  JobCause cause;
  if (end.recorded && end.recorded->root_cause) {
    cause = cause_of(*end.recorded->root_cause);
    log.warning("etcd records the job's end, by the host that took over while this node was cut off from etcd (",
                end.recorded->host, "): ", cause.text, "; this node ends with it, not with its own verdict");
  } else if (end.recorded) {
    cause.text = "this node was cut off from the job, which went on without it: " + rdzv::describe(*end.recorded) +
                 " (recorded in etcd by " + end.recorded->host + ")";
    cause.exit_code = kExitRdzvLost;
    log.warning(cause.text);
  } else if (!end.unconfirmed.empty()) {
    cause.text = end.unconfirmed;
    cause.exit_code = kExitRdzvLost;
    log.error(cause.text);
  } else {
    return std::nullopt;
  }
  cause.time_ms = unix_ms();
  return cause;
}

// The rendezvous lost (or refusing): the exit code is the error's. When this node's part was done (every worker
// succeeded) the workers' success is no verdict on the job, but the line says what this node does know (issue 37).
JobCause cause_of(const rdzv::ClientError& e, bool workers_succeeded) {
  JobCause c;
  c.text = e.message;
  if (e.kind == rdzv::ErrorKind::kLostServer && workers_succeeded)
    c.text = "this node's workers all succeeded, but the end of the job could not be confirmed: " + e.message;
  c.exit_code = exit_code_of(e);
  c.time_ms = unix_ms();
  return c;
}

// The stop order in the log, said only when the news is from elsewhere (`ours`: this node's own failure or
// signal, already logged). The server's reason goes with it: which rule ended the job ("1 node left, fewer than
// the 2 that --nnodes 2:3 needs"), or, to a node that left an elastic job, that the others go on without it.
// Another node's ddprun told to stop (scancel, preemption) is a warning, as here; a failure is an error.
void say_job_stopped(const Logger& log, const rdzv::StopOrder& order, const JobCause& cause, bool ours, bool elastic) {
  const std::string said = order.reason.empty() ? "" : " (" + order.reason + ")";
  if (!ours && rdzv::is_agent_stopped(order.root_cause)) log.warning("job stopped: ", cause.text, said);
  else if (!ours) log.error("job stopped: ", cause.text, said);
  else if (!order.reason.empty() && elastic) log.warning("the rendezvous says: ", order.reason);  // does it go on?
}
}  // namespace

rdzv::ClientHandlers NodeAgent::rendezvous_handlers() {
  return rdzv::ClientHandlers{
      [this](const rdzv::Assignment& a) { on_assignment(a); },
      [this](const rdzv::StopOrder& s) { on_stop(s); },
      [this](bool noticed) {
        policy_.on_job_complete(noticed);
        if (!lifecycle_.placed_once())
          log_.info("the job completed before the rendezvous placed this node in a round: nothing ran here");
        on_outcome(nullptr, "complete");
      },
      [this](const rdzv::ClientError& e) {
        log_.error(e.message);
        const bool succeeded = lifecycle_.processes_gone() && policy_.phase() == Phase::kRunning &&
                               policy_.exit_code() == 0 && !policy_.workers().empty();
        const JobCause c = cause_of(e, succeeded);
        on_outcome(&c, "rendezvous_error");
      },
      [this] { hang_.on_capture_requested(); },
      [this](const rdzv::JobViewMsg& view) { live_.on_job_view(view); },
      [this](const rdzv::StragglersMsg& named) { live_.on_stragglers(named); },
      // A separate ddprun-rendezvous lost and looked for, or back (the client logs both): the events file says so.
      [this](bool back, const std::string& text) {
        events_.write(back ? event::rendezvous_resumed(unix_ms(), text) : event::rendezvous_lost(unix_ms(), text));
        if (back) hang_.on_server_resumed();
        else fence_round(text);
      },
      [this](const rdzv::HangDeferredMsg& m) { hang_.on_deferred(m); },
      {},  // on_heartbeat_ack: the load generator's
      [this](int round) { reform_.on_meet(round); }};
}

// This node cannot take part (link_.start failed): nothing was started. The other nodes of the job would wait
// --rdzv-timeout for it: they are told now, and end with this reason (exit 69 everywhere). A stop signal cuts
// the telling short (on_signal).
int NodeAgent::end_before_start(const std::string& why, int code) {
  console::write(2, "ddprun: error: " + why + "\n");
  if (link_.announce_start_failure(why, [this] { io_.stop(); })) {
    announcing_start_failure_ = true;
    io_.run();
  }
  console::set_on_room(nullptr);
  release();
  output_.drain_console();
  return code;
}

void NodeAgent::on_assignment(const rdzv::Assignment& a) {
  if (a.local_world_size() != world_.local_world_size)
    throw Error("the rendezvous assigned " + std::to_string(a.local_world_size()) + " workers to this node, not " +
                std::to_string(world_.local_world_size));  // a bug: the server only echoes our nproc
  take_assignment(world_, a);
  live_.on_new_round();  // the server judges stragglers afresh
  // One block per node and round, so a log shows at a glance where every node's ranks went.
  if (a.nnodes > 1) log_.info(rdzv::format_summary(a, config_.host));
  // --stdin-rank names a global rank, which a multi-node job knows only now (one node: checked at start-up).
  if (config_.stdin_rank >= a.world_size)
    log_.warning("--stdin-rank ", config_.stdin_rank, ": this round's ranks are 0-", a.world_size - 1,
                 ", so no worker reads ddprun's stdin");
  events_.write(event::rendezvous(unix_ms(), a));
  lifecycle_.on_placed();
  if (lifecycle_.awaits_reform()) return reform_.on_assignment();  // this node's workers stay (InPlaceReform)
  if (policy_.phase() != Phase::kRunning) return;  // a signal came first: on_signal already reported it
  if (a.restart_count > 0) layout_.prepare_attempt(a.restart_count, world_.local_world_size);
  lifecycle_.on_workers_started();
  start_workers();
}

void NodeAgent::on_stop(const rdzv::StopOrder& order) {
  hang_.on_stop_order(order.root_cause);
  const JobCause cause = cause_of(order.root_cause);
  if (order.restarting && reform_.take(order)) return;  // nothing failed and the workers can stay
  // A restart or the end while re-forming in place (or starting again in a round): the usual way from here
  // (AgentLifecycle::on_restart_ordered and on_job_over replace what the round led to).
  if (may_rejoin(order)) return rejoin_after_drop(order);
  if (order.restarting) {
    // The whole job re-forms: down with this attempt's workers, then report_stopped (begin_next_round). The
    // server's reason says why and what it costs ("restart 1 of 3", "a membership change: no restart used").
    const std::string why = order.membership ? order.reason : order.reason + " after: " + cause.text;
    log_.warning(why);
    note_reform(order, /*in_place=*/false);
    lifecycle_.on_restart_ordered();
    apply(policy_.on_external_stop(unix_ms()), "restart");
    maybe_finish();
    return;
  }
  const bool ours = order.root_cause.node_rank == world_.node_rank && (policy_.root_cause() || policy_.stop_signal());
  say_job_stopped(log_, order, cause, ours, config_.rdzv.job.min_nodes < config_.rdzv.job.max_nodes);
  // Another node's ddprun got a signal inside a SLURM step: this node's copy is on its way (on_signal).
  if (PeerSignalWait::applies(config_.step_signals_reach_workers, ours, order.root_cause,
                              lifecycle_.workers_started() && policy_.phase() == Phase::kRunning))
    return peer_signal_.wait([this, cause] { on_outcome(&cause, "stopped_by_rendezvous"); });
  on_outcome(&cause, "stopped_by_rendezvous");
}

// Dropped from an elastic job that goes on without this node (missed heartbeats: it was perhaps only paused,
// a frozen VM, a SIGSTOP): unless this ddprun was told to stop, it ends its stale workers and then joins the
// job again as a new node (begin_next_round → RendezvousLink::rejoin), placed like any late joiner.
bool NodeAgent::may_rejoin(const rdzv::StopOrder& order) const {
  return order.rejoin && !order.restarting && policy_.stop_signal() == 0 && !link_.hosting() &&
         lifecycle_.placed_once() && !lifecycle_.outcome_known();
}

void NodeAgent::rejoin_after_drop(const rdzv::StopOrder& order, bool fenced) {
  log_.warning(fenced ? "" : "the rendezvous says: ", order.reason,
               fenced ? "; then" : "; this node's workers are stale: ending them, then", " joining the job again "
               "as a new node");
  events_.write(event::dropped(unix_ms(), order.reason));
  attempts_.push_back(Attempt{world_.restart_count, world_.nnodes, world_.world_size, order.reason});
  lifecycle_.on_dropped();
  Decision d = policy_.on_external_stop(unix_ms());
  if (fenced) d = {policy_.on_grace_expired(unix_ms()).signal_all, false, d.teardown_began};  // SIGKILL alone
  apply(d, fenced ? "the rendezvous server fell silent" : "dropped from the job");
  maybe_finish();
}

void NodeAgent::fence_round(const std::string& lost_why) {
  rdzv::StopOrder order;
  order.rejoin = true;
  order.reason = round_fence_reason(lost_why);
  const rdzv::JobConfig& job = config_.rdzv.job;
  if (!round_fence_applies({job.min_nodes < job.max_nodes, link_.hosting(),
                            lifecycle_.workers_started() && policy_.phase() == Phase::kRunning,
                            link_.client().lost_silently()}) || !may_rejoin(order))
    return;
  link_.expect_rejoin(lost_why);
  rejoin_after_drop(order, /*fenced=*/true);
}

// A re-form of the running round, restarting or in place: the events file's `restarting` and the summary's
// earlier round.
void NodeAgent::note_reform(const rdzv::StopOrder& order, bool in_place) {
  const std::string cause = rdzv::describe(order.root_cause);
  events_.write(event::restarting(unix_ms(), cause, order.reason, order.membership, in_place));
  attempts_.push_back(Attempt{world_.restart_count, world_.nnodes, world_.world_size,
                              order.membership ? order.reason : cause});
}

// The job's end as the rendezvous tells it (cause == nullptr: every node succeeded). Always terminal.
void NodeAgent::on_outcome(const JobCause* cause, const char* reason) {
  // Nothing was started (refused, timed out, stopped before the assignment): nothing to wait for.
  lifecycle_.on_job_over();
  if (cause && slurm_cause_) cause = &*slurm_cause_;  // the rendezvous heard a node's SIGTERM; SLURM knows why
  if (cause) {
    // Another node's SIGTERM (or preemption) under SLURM: the same question as for this node's own.
    if (is_stop_of_a_node(*cause)) ask_slurm_why_stopped();
    const Decision d = policy_.on_job_cause(*cause, unix_ms());
    if (lifecycle_.workers_started()) apply(d, reason);  // else nothing to tear down, and nothing to say about it
  }
  maybe_finish();
}

void NodeAgent::on_end_in_etcd(const EndInEtcd& end) {
  if (const auto cause = cause_of(end, log_)) policy_.on_job_cause(*cause, unix_ms());  // the workers are gone
}

// Every process of the stopped attempt is gone and its output drained: tell the rendezvous, and start
// over when the next assignment comes (on_assignment).
void NodeAgent::begin_next_round(AgentLifecycle::Next how) {
  if (lifecycle_.finished()) return;  // the job's end came while this was posted: no next round
  lifecycle_.on_next_round();
  sweep_.cancel();
  // Streams still waiting for room on the console keep draining beside the next round (maybe_finish).
  output_.retire_round();
  local_rank_of_.clear();
  // ddprun was told to stop while the round's workers went down: no next round, the job ends.
  if (const int signal = policy_.stop_signal(); signal != 0) return reports_.left_between_rounds(signal);
  policy_.reset_for_restart();
  if (how == AgentLifecycle::Next::kRestartInRound) return start_again_in_round();  // node_agent_workers.cpp
  if (how == AgentLifecycle::Next::kRejoin) {
    log_.info("joining the job again as a new node");
    return link_.rejoin();
  }
  link_.client().report_stopped();
}

}  // namespace ddprun::agent
