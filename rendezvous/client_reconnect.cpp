#include "rendezvous/client_reconnect.hpp"

#include "common/counted.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

void Reconnect::on_assignment(const Assignment& a) {
  if (timeout_.count() > 0) {
    round_ = a;
  } else {  // never reconnecting, it never claims: the round's nprocs (one int per node) are not kept
    round_.emplace();
    round_->node_rank = a.node_rank;
    round_->nnodes = a.nnodes;
    round_->rank_offset = a.rank_offset;
    round_->restart_count = a.restart_count;
  }
  last_round_ = a.restart_count;
  workers_down_ = false;
  replay_.clear();
}

void Reconnect::on_restart_ordered() {
  round_.reset();
  replay_.clear();
}

bool Reconnect::note_sent(const ClientMessage& message, const std::string& frame) {
  if (std::holds_alternative<StoppedMsg>(message)) workers_down_ = true;
  const bool sticky = std::holds_alternative<FailureMsg>(message) || std::holds_alternative<NodeDoneMsg>(message);
  if (sticky && round_) replay_.push_back(frame);
  return !active_ || sticky;
}

bool Reconnect::on_lost(const std::string& why, const std::string& where, Logger& log, bool silent) {
  if (active_) return Clock::now() < deadline_;
  if (timeout_.count() <= 0 || !last_round_) return false;
  const bool ask_verdict = !server_resumable_ && silent && round_ && verdict_window_.count() > 0;
  if (!server_resumable_ && !ask_verdict) return false;
  active_ = true;
  lost_why_ = why;
  lost_at_ = Clock::now();
  episode_ = ask_verdict ? std::min(timeout_, verdict_window_) : timeout_;
  asking_verdict_ = ask_verdict;
  deadline_ = lost_at_ + episode_;
  attempts_ = 0;
  if (ask_verdict)
    log.warning("lost the rendezvous server at ", where, " (", why, "); asking it again for up to ",
                text::seconds(episode_), " how the job goes on (a cut link heals, and the server says what it judged)");
  else if (round_)
    log.warning("lost the rendezvous server at ", where, " (", why, "); the workers keep training; reconnecting for up ",
                "to ", text::seconds(episode_));
  else
    log.warning("lost the rendezvous server at ", where, " (", why, ") between rounds; reconnecting for up to ",
                text::seconds(episode_), " to join the round after round ", *last_round_,
                workers_down_ ? "" : " once this node's workers are down");
  return true;
}

std::optional<int> Reconnect::after_round() const {
  if (!active_ || round_) return std::nullopt;
  return last_round_;
}

std::optional<ResumeClaim> Reconnect::claim() const {
  if (!active_ || !round_) return std::nullopt;
  return resume_claim_of(*round_);
}

void Reconnect::on_resumed(const std::string& where, Logger& log) {
  active_ = false;
  const std::string after = text::seconds(duration_cast<milliseconds>(Clock::now() - lost_at_)) + " (" +
                            counted(attempts_, "attempt") + ")";
  if (round_)
    log.info("reconnected to the rendezvous server at ", where, " after ", after, ": this node resumed round ",
             round_->restart_count);
  else
    log.info("reconnected to the rendezvous server at ", where, " after ", after, ": this node waits for the round ",
             "after round ", last_round_.value_or(0));
}

void Reconnect::on_dropped() {
  active_ = false;
  round_.reset();
  replay_.clear();
}

std::string Reconnect::give_up(const std::string& where, const std::string& last) const {
  const std::string tries = counted(attempts_, "attempt") + " to reconnect, the last: " + last;
  // Node 0's own server is not restarted: this node only asked it how the job ended, for as long as that server
  // waits to tell a node it lost (its heartbeat timeout), unless --rdzv-reconnect-timeout is shorter. Issue 53: the
  // line named --rdzv-reconnect-timeout for a window that was the heartbeat timeout.
  if (asking_verdict_) {
    const char* window = verdict_window_ <= timeout_ ? "--heartbeat-timeout" : "--rdzv-reconnect-timeout";
    return "lost the rendezvous server at " + where + ": " + lost_why_ + "; it did not answer again within " +
           text::seconds(episode_) + " (" + window + ", how long node 0 waits to tell a node it lost how the job " +
           "ended; " + tries + "): this node cannot learn how the job ended, see the other nodes' logs";
  }
  return "lost the rendezvous server at " + where + ": " + lost_why_ + "; no server took this node back within " +
         text::seconds(episode_) + " (--rdzv-reconnect-timeout; " + tries + ")";
}

}  // namespace ddprun::rendezvous
