// The client's connection: connecting with retries (candidate ports, name look-ups, attempt limits),
// heartbeats and a silent server, and the way back to a restarted one (client_reconnect.hpp).
#include <unistd.h>

#include "common/stall_clock.hpp"
#include "rendezvous/client_impl.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

void Client::Impl::next_port() {
  if (candidates()) port_index_ = (port_index_ + 1) % ports_.size();
}

void Client::Impl::abandon_connection(const std::string& why) {
  drop_connection();
  retry(why, /*rotate=*/true);
}

void Client::Impl::drop_connection() {
  error_code ignored;
  // Aborted, not closed: a close would leave what is queued (a node_done, a failure) for the kernel to deliver
  // once a cut link heals, to a server that then counts it on a connection this client no longer reads; the
  // reports go again, in order, on the next connection (client_reconnect.hpp). The server sees a reset.
  if (socket_.is_open()) socket_.set_option(asio::socket_base::linger(true, 0), ignored);
  socket_.close(ignored);
  connected_ = challenged_ = false;
  awaiting_proof_.reset();
  heartbeat_timer_.cancel();
  decoder_ = FrameDecoder(config_.max_frame_bytes + kSealTagBytes);  // drop a challenge cut short
  seal_in_.reset();  // the next connection has nonces, keys and sequences of its own
  seal_out_.reset();
  opened_any_ = false;
  heartbeats_sent_.clear();  // their answers would come on this connection
  ++attempt_;  // a read, write or timer of this connection still pending is now stale
}

void Client::Impl::lost(const std::string& why, bool silent) {
  if (silent && !reconnect_.active() && !reconnect_.placed() && Clock::now() < connect_deadline_) {
    // Silent before any round placed this node (the handshake, or the wait for the others: a lossy link, found
    // at 30% loss in the fault lab): no round is lost, so connect again within the connect deadline, as when
    // nobody answered; the new hello takes this node's place back (state_machine.cpp: a silent holder of the
    // same host is replaced). A closed or reset connection still ends here: that server is gone.
    logger_.warning("the rendezvous server at ", where(), " fell silent before this node was placed (", why,
                    "); connecting again");
    hello_sent_ = writing_ = false;
    outbox_.clear();
    heartbeat_interval_ = kHandshakeInterval;
    heartbeat_timeout_ = kHandshakeTimeout;
    return abandon_connection(why);
  }
  const bool first = !reconnect_.active();
  if (first) lost_silent_ = silent;
  if (!reconnect_.on_lost(why, where(), logger_, silent)) {
    if (reconnect_.active()) return fail(ErrorKind::kLostServer, reconnect_.give_up(where(), why));
    return fail(ErrorKind::kLostServer, "lost the rendezvous server at " + where() + ": " + why);
  }
  drop_connection();
  hello_sent_ = writing_ = false;
  outbox_.clear();  // what was not written is lost with the connection; the reports that matter are replayed
  last_heard_ = StallClock::now();
  retry_delay_ = kFirstRetry;
  connect_deadline_ = reconnect_.deadline();
  // Between rounds with the workers still going down: the hello waits for them (send(), at `stopped`).
  if (!reconnect_.waiting_for_workers()) retry(why);
  if (first && handlers_.on_reconnect) handlers_.on_reconnect(false, why);  // last: the handler may close us
}

void Client::Impl::retarget(const std::string& host, std::uint16_t port) {
  config_.server_host = host;
  ports_.assign(1, port);
  port_index_ = 0;
  name_problem_.clear();
  resolved_ = false;
  if (done_ || connected_ || !reconnect_.active() || reconnect_.waiting_for_workers()) return;
  // What is pending (a look-up, a connect, a back-off) is for the old address: stale now, and the next try is now.
  ++attempt_;
  error_code ignored;
  socket_.close(ignored);
  lookup_.cancel();
  race_.cancel();
  retry_timer_.cancel();
  attempt_timer_.cancel();
  retry_delay_ = kFirstRetry;
  connect();
}

void Client::Impl::connect() {
  const unsigned attempt = ++attempt_;
  if (reconnect_.active()) reconnect_.on_attempt();
  arm_attempt_limit(attempt);
  error_code ec;
  auto address = asio::ip::make_address(config_.server_host, ec);
  if (!ec) {
    resolved_ = true;
    return connect_to({tcp::endpoint(address, port())}, attempt);
  }
  lookup_.start(config_.server_host, port(), [self = shared_from_this(), attempt](const LookupResult& r) {
    if (self->done_ || attempt != self->attempt_) return;  // given up on meanwhile
    if (!r.ok) {
      self->say_unresolved(r.error);
      self->name_problem_ = r.error;  // kept to the end: a later time-out must not hide it
      return self->retry(r.error);
    }
    self->resolved_ = true;
    self->connect_to(r.endpoints, attempt);
  });
}

void Client::Impl::arm_attempt_limit(unsigned attempt) {
  const auto left = std::chrono::duration_cast<milliseconds>(connect_deadline_ - Clock::now());
  attempt_timer_.expires_after(std::max(milliseconds(1), std::min(attempt_limit_, left)));
  attempt_timer_.async_wait([self = shared_from_this(), attempt](error_code ec) {
    if (ec || self->done_ || self->connected_ || attempt != self->attempt_) return;
    ++self->attempt_;  // the pending look-up or connect now belongs to a finished attempt
    error_code ignored;
    self->socket_.close(ignored);
    self->lookup_.cancel();
    self->race_.cancel();
    const milliseconds ran_out = self->attempt_limit_;
    self->attempt_limit_ = std::min(self->attempt_limit_ * 2, kMaxAttemptLimit);  // perhaps a slow path
    self->retry("no answer within " + text::seconds(ran_out), /*rotate=*/true);
  });
}

void Client::Impl::say_unresolved(const std::string& why) {
  if (said_unresolved_) return;
  said_unresolved_ = true;
  const std::string until = reconnect_.active() ? "the reconnect timeout (--rdzv-reconnect-timeout)"
                                                : text::seconds(connect_limit_) + " have passed (" +
                                                      config_.connect_timeout_option + ")";
  logger_.warning("cannot resolve the rendezvous host \"", config_.server_host, "\": ", why, "; retrying until ",
                  until, " (name it with --master-addr or --rdzv-endpoint)");
}

void Client::Impl::connect_to(std::vector<tcp::endpoint> endpoints, unsigned attempt) {
  error_code ignored;
  socket_.close(ignored);
  race_.start(std::move(endpoints), [self = shared_from_this(), attempt](const RaceResult& r) {
    if (self->done_ || attempt != self->attempt_) return;
    self->attempt_timer_.cancel();
    if (!r.ok) return self->retry(r.why, /*rotate=*/true);
    self->socket_ = std::move(*r.socket);
    self->connected_at_ = Clock::now();
    error_code opt_ec;
    self->socket_.set_option(tcp::no_delay(true), opt_ec);
    self->last_heard_ = StallClock::now();
    self->connected_ = true;
    self->read_some();
    self->schedule_heartbeat();
  });
}

void Client::Impl::say_trying() {
  if (said_trying_ || reconnect_.active() || Clock::now() - trying_since_ < kSayTryingAfter) return;
  said_trying_ = true;
  if (!resolved_ && !name_problem_.empty()) {  // nobody was asked: the name gave no address yet (issue 54)
    logger_.info("the rendezvous host \"", config_.server_host, "\" has not resolved for ",
                 text::seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - trying_since_)), " (",
                 name_problem_, "); still trying until ", text::seconds(connect_limit_), " have passed (",
                 config_.connect_timeout_option, ")");
    return;
  }
  const std::string answers = race_.answers();
  logger_.info("the rendezvous server at ", where(), " has not answered for ",
               text::seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - trying_since_)),
               answers.empty() ? std::string() : " (" + answers + ")", "; still trying until ",
               text::seconds(connect_limit_), " have passed (", config_.connect_timeout_option, ")");
}

void Client::Impl::retry(const std::string& why, bool rotate) {
  const auto now = Clock::now();
  if (now >= connect_deadline_) {
    if (reconnect_.active()) return fail(ErrorKind::kLostServer, reconnect_.give_up(where(), why));
    if (!resolved_ && !name_problem_.empty())  // never an address to try: not a server that did not answer
      return fail(ErrorKind::kTimeout, "could not resolve the rendezvous host \"" + config_.server_host +
                                           "\" within " + text::seconds(connect_limit_) + " (" +
                                           config_.connect_timeout_option + "): " + name_problem_ +
                                           (why == name_problem_ ? "" : "; the last look-up: " + why) +
                                           "; check the name given to --master-addr or --rdzv-endpoint, or this "
                                           "node's resolver (/etc/hosts, DNS)");
    const std::string ports = candidates() ? " (ports " + port_list() + ")" : "";
    std::string name = name_problem_.empty() || name_problem_ == why
                           ? ""
                           : "; the name \"" + config_.server_host + "\" did not resolve: " + name_problem_;
    if (!unproven_.empty() && unproven_ != why) name += "; earlier, " + unproven_;
    if (race_.addresses() > 1 && why.find(race_.answers()) == std::string::npos)
      name += "; the addresses answered: " + race_.answers();
    return fail(ErrorKind::kTimeout, "could not reach the rendezvous server at " + where() + ports + " within " +
                                         text::seconds(connect_limit_) + " (" + config_.connect_timeout_option +
                                         "): " + why + name);
  }
  logger_.debug("rendezvous server at ", where(), " not reachable yet (", why, "); retrying");
  say_trying();
  if (rotate) next_port();
  milliseconds wait = retry_delay_;
  if (candidates() && rotate && port_index_ != 0) {
    wait = milliseconds(0);  // the rest of this rotation first (kMaxCandidateRotation)
  } else {
    const milliseconds cap = reconnect_.active() ? kMaxReconnectRetry : candidates() ? kMaxCandidateRotation : kMaxRetry;
    retry_delay_ = std::min(retry_delay_ * 2, cap);
  }
  // The last wait is cut to the deadline, where one more attempt is made: the timeout the user gave is the
  // time ddprun keeps trying, not up to one back-off step less.
  retry_timer_.expires_after(std::min(std::chrono::duration_cast<Clock::duration>(wait), connect_deadline_ - now));
  retry_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec && !self->done_) self->connect();
  });
}

void Client::Impl::schedule_heartbeat() {
  heartbeat_timer_.expires_after(hello_sent_ ? heartbeat_interval_ : kHandshakeInterval);
  heartbeat_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->done_) return;
    // The handshake is part of getting in: a server that accepts but never sends its challenge (wedged,
    // or not a rendezvous server) is bounded by the same deadline as connecting.
    if (!self->challenged_ && self->candidates() && Clock::now() - self->connected_at_ >= kCandidateChallengeLimit)
      return self->abandon_connection("the listener at " + self->where() + " sent no challenge within " +
                                      text::seconds(kCandidateChallengeLimit));
    if (!self->challenged_ && Clock::now() >= self->connect_deadline_ && self->reconnect_.active())
      return self->fail(ErrorKind::kLostServer, self->reconnect_.give_up(self->where(), "no challenge"));
    if (!self->challenged_ && Clock::now() >= self->connect_deadline_)
      return self->fail(ErrorKind::kTimeout, "the rendezvous server at " + self->where() +
                                                 " accepted the connection but sent no challenge within " +
                                                 text::seconds(self->config_.connect_timeout));
    // Late by a stop of this process (Ctrl-Z, SIGSTOP, a frozen VM): that time is not the server's
    // silence. Its frames are waiting in the socket and are read before this timer's next turn.
    const auto stall = StallClock::note_late(self->heartbeat_timer_.expiry(), Clock::now());
    if (stall.count() > 0)
      self->logger_.info("this process did not run for ",
                         text::seconds(std::chrono::duration_cast<milliseconds>(stall)),
                         " (stopped or frozen): that time is not counted as the server's silence");
    milliseconds timeout = self->hello_sent_ || self->awaiting_proof_ ? self->heartbeat_timeout_ : kHandshakeTimeout;
    if (StallClock::now() - self->last_heard_ > timeout) return self->lost("nothing heard for " + text::seconds(timeout), /*silent=*/true);
    if (self->hello_sent_) {
      self->send(HeartbeatMsg{});
      self->note_heartbeat_sent();
    }
    self->schedule_heartbeat();
  });
}

std::string Client::Impl::port_list() const {
  std::string out;
  for (std::uint16_t p : ports_) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

std::string Client::Impl::local_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace ddprun::rendezvous
