// The rendezvous client's conversation: the hello (a resume hello after a server restart), the server's
// messages turned into handler calls, and the writes. Connecting and heartbeats: client_connect.cpp.
#include "rendezvous/client.hpp"

#include <boost/asio/write.hpp>

#include "common/stall_clock.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/client_impl.hpp"
#include "rendezvous/munge_auth.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

void Client::Impl::start() {
  JoinRequest& join = config_.join;
  if (join.host.empty()) join.host = local_hostname();
  bool may_be_node0 = !join.node_rank || *join.node_rank == 0;
  if (join.master_port == 0 && may_be_node0) join.master_port = pick_free_port();
  connect_limit_ = cannot_join_.empty() ? config_.connect_timeout : std::min(config_.connect_timeout, kCannotJoinTellLimit);
  trying_since_ = Clock::now();
  connect_deadline_ = trying_since_ + connect_limit_;
  connect();
}

void Client::Impl::report_stopped() {
  StoppedMsg stopped;
  const JoinRequest& join = config_.join;
  const bool may_be_node0 = !join.node_rank || *join.node_rank == 0;
  if (!join.master_port_fixed && may_be_node0) {
    try {
      stopped.master_port = pick_free_port();
    } catch (const ConnectionError& e) {
      logger_.warning("keeping MASTER_PORT ", join.master_port, " for the next round: ", e.what());
    }
  }
  send(stopped);
}

void Client::Impl::send(const ClientMessage& message) {
  if (done_) return;
  std::string frame = encode_frame(encode(message), config_.max_frame_bytes);
  // Lost a resumable server: a failure or node_done waits (Reconnect::replay) for the resume hello.
  const bool waited_for_workers = reconnect_.waiting_for_workers();
  const bool keep = reconnect_.note_sent(message, frame);
  // Lost between rounds while the workers went down: now they are (`stopped`, which the hello replaces).
  if (waited_for_workers && !reconnect_.waiting_for_workers()) connect();
  if (!keep || (reconnect_.active() && !hello_sent_)) return;
  if (!hello_sent_) {
    pending_.push_back(std::move(frame));
    return;
  }
  push_out(std::move(frame));
  if (!writing_) write_next();
}

void Client::Impl::push_out(std::string frame) {
  outbox_.push_back(seal_out_ ? seal_frame(*seal_out_, frame) : std::move(frame));
}

void Client::Impl::open_in(std::string& payload) {
  if (!seal_in_) return;
  if (seal_in_->open(payload)) {
    opened_any_ = true;
    return;
  }
  if (!opened_any_) {  // a refusal in the clear, before anything sealed, passes as it came
    try {
      if (std::holds_alternative<ErrorMsg>(decode_server_message(payload))) return;
    } catch (const ProtocolError&) {
    }
  }
  throw ProtocolError("frame " + std::to_string(seal_in_->sequence()) + " from the server failed its "
                      "authentication (altered, replayed, dropped or reordered on the way: something between this "
                      "node and the server rewrites the connection)");
}

void Client::Impl::close() {
  if (done_) return;
  done_ = true;
  error_code ignored;
  lookup_.cancel();
  race_.cancel();
  retry_timer_.cancel();
  attempt_timer_.cancel();
  heartbeat_timer_.cancel();
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void Client::Impl::read_some() {
  socket_.async_read_some(asio::buffer(read_buffer_), [self = shared_from_this(), attempt = attempt_](
                                                          error_code ec, std::size_t n) {
    // A connection abandoned before its challenge (candidate ports) still completes its read, aborted:
    // it must not touch the next connection.
    if (self->done_ || attempt != self->attempt_) return;
    if (ec && self->leaving_) return self->fail(ErrorKind::kUnavailable, self->cannot_join_);
    if (ec && !self->hello_sent_ && Clock::now() < self->connect_deadline_) {
      // Closed before its challenge, or before this node's hello (issue 55: a server at its connection limit, a
      // flood of strangers beside the job, closed agents mid-handshake and the job failed), or still starting.
      // Not a lost server yet: connect again, within the connect deadline.
      return self->abandon_connection(self->challenged_ ? "closed during the handshake, before this node's hello"
                                                        : "closed before the challenge");
    }
    if (ec) return self->lost(ec == asio::error::eof ? "connection closed" : ec.message());
    self->last_heard_ = StallClock::now();
    try {
      self->decoder_.feed(std::string_view(self->read_buffer_.data(), n));
      while (auto payload = self->decoder_.next()) {
        self->open_in(*payload);
        self->handle(decode_server_message(*payload));
        if (self->done_ || attempt != self->attempt_) return;  // ended, or abandoned (another job's server)
      }
    } catch (const ProtocolError& e) {
      // Before the server proved this connection it is a program on the port, not our server misbehaving.
      if (!self->hello_sent_) return self->distrust("does not speak the rendezvous protocol (" + std::string(e.what()) + ")");
      return self->fail(ErrorKind::kProtocol, "bad message from the rendezvous server at " + self->where() +
                                                  ": " + e.what());
    }
    self->read_some();
  });
}

void Client::Impl::handle(ServerMessage message) {
  if (auto* challenge = std::get_if<ChallengeMsg>(&message)) return on_challenge(*challenge);
  if (auto* proof = std::get_if<ProofMsg>(&message)) return on_proof(*proof);
  if (!hello_sent_) throw ProtocolError("expected a challenge first");
  if (auto* error = std::get_if<ErrorMsg>(&message)) {
    if (leaving_) return fail(ErrorKind::kUnavailable, cannot_join_);
    std::string prefix = error->kind != ErrorKind::kRefused ? ""
                         : reconnect_.active()              ? "the restarted rendezvous server refused this node's return: "
                                                            : "the rendezvous server refused this node: ";
    return fail(error->kind, prefix + error->message);
  }
  // The server went on without this node (dropped while away): not taken back, told to join again instead.
  if (const auto* dropped = std::get_if<StopMsg>(&message); reconnect_.active() && dropped && dropped->rejoin)
    reconnect_.on_dropped();
  if (reconnect_.active()) {  // anything but a refusal: the restarted server took us back
    reconnect_.on_resumed(where(), logger_);
    if (handlers_.on_reconnect) handlers_.on_reconnect(true, where());
    if (done_) return;
  }
  if (auto* assignment = std::get_if<Assignment>(&message)) {
    // A server of this job only echoes the worker count this node said (issue 55: an insider acting as server gave
    // another, and the agent ended with "internal error", 70).
    if (assignment->local_world_size() != config_.join.nproc)
      return fail(ErrorKind::kProtocol, "the rendezvous server at " + where() + " assigned " +
                                            std::to_string(assignment->local_world_size()) +
                                            " workers to this node, which said " + std::to_string(config_.join.nproc) +
                                            ": no server of this job does that");
    reconnect_.on_assignment(*assignment);
    if (handlers_.on_assignment) handlers_.on_assignment(*assignment);
  } else if (auto* stop = std::get_if<StopMsg>(&message)) {
    StopOrder order{std::move(stop->root_cause), std::move(stop->reason), stop->restarting, stop->membership,
                    stop->rejoin};
    if (order.restarting) reconnect_.on_restart_ordered();
    if (!order.restarting) close();  // final: nothing more to hear, and the server's going away is expected
    if (handlers_.on_stop) handlers_.on_stop(order);
  } else if (auto* complete = std::get_if<CompleteMsg>(&message)) {
    const bool noticed = complete->noticed;
    close();
    if (handlers_.on_job_complete) handlers_.on_job_complete(noticed);
  } else if (std::holds_alternative<CaptureMsg>(message)) {
    if (handlers_.on_capture) handlers_.on_capture();
  } else if (auto* deferred = std::get_if<HangDeferredMsg>(&message)) {
    if (handlers_.on_hang_deferred) handlers_.on_hang_deferred(*deferred);
  } else if (auto* view = std::get_if<JobViewMsg>(&message)) {
    if (handlers_.on_job_view) handlers_.on_job_view(*view);
  } else if (auto* named = std::get_if<StragglersMsg>(&message)) {
    if (handlers_.on_stragglers) handlers_.on_stragglers(*named);
  } else if (auto* meet = std::get_if<MeetMsg>(&message)) {
    if (handlers_.on_meet) handlers_.on_meet(meet->round);
  } else if (std::holds_alternative<HeartbeatAckMsg>(message) && !heartbeats_sent_.empty()) {
    const auto rtt = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - heartbeats_sent_.front());
    heartbeats_sent_.pop_front();
    if (handlers_.on_heartbeat_ack) handlers_.on_heartbeat_ack(rtt);
  }
}

void Client::Impl::note_heartbeat_sent() {
  if (heartbeats_sent_.size() >= 64) heartbeats_sent_.pop_front();  // a server that never answers: bounded
  heartbeats_sent_.push_back(Clock::now());
}

void Client::Impl::on_challenge(const ChallengeMsg& challenge) {
  if (hello_sent_ || awaiting_proof_) throw ProtocolError("a second challenge");
  challenged_ = true;
  // Whatever a program that has not proved itself says, it is passed by, not believed: another user's program on
  // the port must not end this node (issue 33). What it said is in the warning and in the final error, so a real
  // server of another ddprun version is still named as such.
  if (challenge.protocol != kProtocolName || challenge.version != kProtocolVersion)
    return distrust("speaks " + challenge.protocol + " v" + std::to_string(challenge.version) + "; this ddprun speaks " +
                    kProtocolName + " v" + std::to_string(kProtocolVersion));
  if (challenge.heartbeat_interval_ms <= 0 || challenge.heartbeat_timeout_ms <= challenge.heartbeat_interval_ms)
    return distrust("sent nonsensical heartbeat settings in its challenge");
  // Nothing is believed or sent before the server proves it knows the job's token and run id (issue 33): a
  // program of another user that took the port first (before node 0 listens, or in the window of a server
  // restart) would otherwise hand the workers its own MASTER_ADDR, and collect this node's MAC over a nonce of
  // its choosing, its resume claim and its status. This node keeps looking for the real server until its
  // timeout. Candidate ports (a SLURM step): another job's server is passed by the same way.
  if (!verify_server_proof(config_.token, challenge.nonce, config_.run_id, challenge.proof)) return distrust();
  // The challenge's proof screens other jobs' servers, but a stranger may replay one it recorded: the server
  // proves this very connection too, over a nonce of ours, before anything is sent (issue 33, docs/SECURITY.md).
  prove_nonce_ = generate_nonce();
  awaiting_proof_ = challenge;
  // Its heartbeat settings bound the wait for the proof (a real server answers at once); nothing else of the
  // challenge is acted on before the proof.
  heartbeat_interval_ = milliseconds(challenge.heartbeat_interval_ms);
  heartbeat_timeout_ = milliseconds(challenge.heartbeat_timeout_ms);
  outbox_.push_back(encode_frame(encode(ClientMessage{ProveMsg{prove_nonce_}}), config_.max_frame_bytes));
  if (!writing_) write_next();
}

void Client::Impl::distrust(const std::string& said) {
  const std::string why = !said.empty()  ? "the program at " + where() + " " + said
                          : candidates() ? "the server at " + where() + " belongs to another job"
                                         : "the program at " + where() +
                                               " did not prove it knows this job's token and run id: another "
                                               "job's server, one given another token (check --rdzv-id and "
                                               "--rdzv-token-file / DDPRUN_TOKEN / --rdzv-token on every node and "
                                               "the server), or another user's program";
  if (!candidates() && !said_unproven_) {
    said_unproven_ = true;
    logger_.warning(why, ": not trusted; looking for the real rendezvous server until the rendezvous timeout");
  }
  unproven_ = why;
  abandon_connection(why);
}

void Client::Impl::on_proof(const ProofMsg& proof) {
  if (!awaiting_proof_ || hello_sent_) throw ProtocolError("a proof nobody asked for");
  const ChallengeMsg challenge = std::move(*awaiting_proof_);
  awaiting_proof_.reset();
  if (!verify_connection_proof(config_.token, challenge.nonce, prove_nonce_, config_.run_id,
                               challenge_settings(challenge), proof.proof))
    return distrust();
  // Proved, settings and all: from the hello on, both ways are sealed under keys of this connection.
  seal_out_ = std::make_unique<FrameSeal>(config_.token, challenge.nonce, prove_nonce_, config_.run_id,
                                          FrameSeal::Direction::kAgentToServer);
  seal_in_ = std::make_unique<FrameSeal>(config_.token, challenge.nonce, prove_nonce_, config_.run_id,
                                         FrameSeal::Direction::kServerToAgent);
  send_hello(challenge);
}

void Client::Impl::send_hello(const ChallengeMsg& challenge) {
  reconnect_.on_challenge(challenge.resumable, milliseconds(challenge.heartbeat_timeout_ms));
  server_meets_ = challenge.meets;
  HelloMsg hello;
  hello.run_id = config_.run_id;
  hello.mac = compute_mac(config_.token, challenge.nonce, config_.run_id);
  if (challenge.munge && cannot_join_.empty()) {
    try {
      hello.munge_credential = make_munge_credential(config_.munge_socket, challenge.nonce, config_.run_id);
    } catch (const MungeError& e) {
      // Without munged this node cannot prove who it is: nothing to retry (DDPRUN_MUNGE_SOCKET names
      // another). It says so instead of joining, so that the others need not wait for it.
      cannot_join_ = "the rendezvous requires a MUNGE credential and this node cannot make one: " +
                     std::string(e.what()) + " (start munged, or set DDPRUN_MUNGE_SOCKET to its socket)";
    }
  }
  hello.cannot_join = cannot_join_;
  leaving_ = !cannot_join_.empty();
  hello.node_rank = config_.join.node_rank;
  hello.nproc = config_.join.nproc;
  hello.host = config_.join.host;
  hello.address = config_.join.address;
  hello.master_port = config_.join.master_port;
  hello.hosts_server = config_.join.hosts_server;
  hello.seat = seat_;
  hello.resume = reconnect_.claim();
  if (hello.resume) hello.resume->seat_secret = seat_secret_;
  hello.after_round = reconnect_.after_round();
  if (!hello.after_round) hello.after_round = config_.join.after_round;
  hello_sent_ = true;
  // In: a later search (a restarted server) says its own addresses. Not at each connect: an agent whose connections
  // a flood of strangers closed before its hello said "has not answered" at every try (issue 55).
  said_trying_ = false;
  push_out(encode_frame(encode(ClientMessage{hello}), config_.max_frame_bytes));
  // Back after a loss: a heartbeat at once, whose answer says the server took us back (or, between rounds, that
  // it heard us: nothing else comes before the next round), without waiting for the heartbeat interval.
  if (hello.resume || hello.after_round)
  {
    push_out(encode_frame(encode(ClientMessage{HeartbeatMsg{}}), config_.max_frame_bytes));
    note_heartbeat_sent();
  }
  if (hello.resume)
    for (const std::string& frame : reconnect_.replay()) push_out(frame);
  for (auto& frame : pending_) push_out(std::move(frame));
  pending_.clear();
  if (!writing_) write_next();
  schedule_heartbeat();  // now at the server's interval, replacing the handshake watchdog's wait
}

void Client::Impl::write_next() {
  if (outbox_.empty() && leaving_ && !done_) return fail(ErrorKind::kUnavailable, cannot_join_);  // said
  if (outbox_.empty() || done_ || !connected_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(outbox_.front()),
                    [self = shared_from_this(), attempt = attempt_](error_code ec, std::size_t) {
    if (self->done_ || attempt != self->attempt_) return;  // a connection given up on since
    if (ec) return self->lost(ec.message());
    self->outbox_.pop_front();
    self->write_next();
  });
}

void Client::Impl::fail(ErrorKind kind, const std::string& message) {
  if (done_) return;
  close();
  // A node that cannot take part ends for that reason, whether or not the others could be told.
  if (!cannot_join_.empty() && kind != ErrorKind::kUnavailable)
    return report(ClientError{ErrorKind::kUnavailable, cannot_join_ + " (the rendezvous could not be told: " +
                                                           message + ")"});
  report(ClientError{kind, message});
}

void Client::Impl::report(const ClientError& error) {
  if (handlers_.on_error) handlers_.on_error(error);
}

Client::Client(asio::io_context& io, ClientConfig config, ClientHandlers handlers, Logger logger)
    : impl_(std::make_shared<Impl>(io, std::move(config), std::move(handlers), std::move(logger))) {}
Client::~Client() { impl_->close(); }
void Client::start() { impl_->start(); }
void Client::report_failure(const Failure& failure) { impl_->send(FailureMsg{failure}); }
void Client::report_node_done(bool noticed) { impl_->send(NodeDoneMsg{noticed}); }
void Client::report_stopped() { impl_->report_stopped(); }
void Client::report_hang_view(const HangViewMsg& view) { impl_->send(view); }
bool Client::report_round_ready(int round) {
  if (!impl_->server_meets()) return false;
  impl_->send(RoundReadyMsg{round});
  return true;
}
void Client::report_status(std::string status_json, std::vector<RankPace> paces) {
  impl_->send(NodeStatusMsg{std::move(status_json), std::move(paces)});
}
void Client::request_view() { impl_->send(ViewRequestMsg{}); }
void Client::close() { impl_->close(); }
bool Client::reconnecting() const { return impl_->reconnecting(); }
bool Client::lost_silently() const { return impl_->lost_silently(); }
bool Client::server_resumable() const { return impl_->server_resumable(); }
std::optional<int> Client::last_round() const { return impl_->last_round(); }
void Client::leave_round() { impl_->leave_round(); }
void Client::retarget(const std::string& host, std::uint16_t port) { impl_->retarget(host, port); }

}  // namespace ddprun::rendezvous
