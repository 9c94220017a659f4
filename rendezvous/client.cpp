#include "rendezvous/client.hpp"

#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>

#include "common/stall_clock.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/munge_auth.hpp"
#include "rendezvous/name_lookup.hpp"
#include "rendezvous/text.hpp"
#include "rendezvous/framing.hpp"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using std::chrono::milliseconds;

namespace {
// Until the challenge names the server's heartbeat settings.
constexpr milliseconds kHandshakeInterval{500};
constexpr milliseconds kHandshakeTimeout{10'000};
// Nodes usually start together, and node 0 may open its server a few ms after the others connect (longer with
// MUNGE: it first checks that munged answers). A refused connect costs a SYN and a RST; retrying after 2, 4, 8 ...
// ms (was 20, 40 ...) saved ~18 ms of a 2-node job's start whenever node 1 came first (BENCHMARKS "MUNGE").
constexpr milliseconds kFirstRetry{2};
constexpr milliseconds kMaxRetry{1000};
// One connect attempt (or name look-up) may take this long, and never past the connect deadline: a server
// whose SYNs vanish (a firewall, a full accept queue) would otherwise hold a connect() for ~2 minutes.
constexpr milliseconds kAttemptLimit{3000};
// With candidate ports (a SLURM step), a port whose listener sends no challenge this soon is not our server
// (an unrelated program holds it): the next candidate is tried.
constexpr milliseconds kCandidateChallengeLimit{1000};
// A node that cannot take part tries this long to say so; the others started with it (a SLURM step), and one
// that cannot be reached in this time is failing too.
constexpr milliseconds kCannotJoinTellLimit{30'000};
}  // namespace

class Client::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ClientConfig config, ClientHandlers handlers, Logger logger)
      : config_(std::move(config)), handlers_(std::move(handlers)), logger_(logger.for_part("rendezvous")),
        lookup_(io), socket_(io), retry_timer_(io), attempt_timer_(io), heartbeat_timer_(io),
        decoder_(config_.max_frame_bytes) {
    ports_.push_back(config_.server_port);
    ports_.insert(ports_.end(), config_.more_ports.begin(), config_.more_ports.end());
    cannot_join_ = config_.cannot_join;
  }

  void start() {
    JoinRequest& join = config_.join;
    if (join.host.empty()) join.host = local_hostname();
    bool may_be_node0 = !join.node_rank || *join.node_rank == 0;
    if (join.master_port == 0 && may_be_node0) join.master_port = pick_free_port();
    connect_limit_ = cannot_join_.empty() ? config_.connect_timeout : std::min(config_.connect_timeout, kCannotJoinTellLimit);
    connect_deadline_ = Clock::now() + connect_limit_;
    connect();
  }

  void report_stopped() {
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

  void send(const ClientMessage& message) {
    if (done_) return;
    std::string frame = encode_frame(encode(message), config_.max_frame_bytes);
    if (!hello_sent_) {
      pending_.push_back(std::move(frame));
      return;
    }
    outbox_.push_back(std::move(frame));
    if (!writing_) write_next();
  }

  void close() {
    if (done_) return;
    done_ = true;
    error_code ignored;
    lookup_.cancel();
    retry_timer_.cancel();
    attempt_timer_.cancel();
    heartbeat_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  using Clock = std::chrono::steady_clock;

  std::uint16_t port() const { return ports_[port_index_]; }
  std::string where() const { return config_.server_host + ":" + std::to_string(port()); }
  bool candidates() const { return ports_.size() > 1; }

  // Candidate ports: the server was not found at this one; the next attempt tries the next.
  void next_port() {
    if (candidates()) port_index_ = (port_index_ + 1) % ports_.size();
  }

  // Drops a connection that has not been challenged (or whose challenge was not our server's) and tries again.
  void abandon_connection(const std::string& why) {
    error_code ignored;
    socket_.close(ignored);
    connected_ = challenged_ = false;
    heartbeat_timer_.cancel();
    decoder_ = FrameDecoder(config_.max_frame_bytes);  // drop a challenge cut short
    ++attempt_;  // a read or timer of this connection still pending is now stale
    retry(why, /*rotate=*/true);
  }

  void connect() {
    const unsigned attempt = ++attempt_;
    arm_attempt_limit(attempt);
    error_code ec;
    auto address = asio::ip::make_address(config_.server_host, ec);
    if (!ec) return connect_to(tcp::endpoint(address, port()), attempt);
    lookup_.start(config_.server_host, port(), [self = shared_from_this(), attempt](const LookupResult& r) {
      if (self->done_ || attempt != self->attempt_) return;  // given up on meanwhile
      if (!r.ok) {
        self->say_unresolved(r.error);
        self->name_problem_ = r.error;  // kept to the end: a later time-out must not hide it
        return self->retry(r.error);
      }
      self->connect_to(r.endpoint, attempt);
    });
  }

  // The attempt's own deadline: past it, the look-up's late answer is ignored and the connect is cancelled.
  void arm_attempt_limit(unsigned attempt) {
    const auto left = std::chrono::duration_cast<milliseconds>(connect_deadline_ - Clock::now());
    attempt_timer_.expires_after(std::max(milliseconds(1), std::min(kAttemptLimit, left)));
    attempt_timer_.async_wait([self = shared_from_this(), attempt](error_code ec) {
      if (ec || self->done_ || self->connected_ || attempt != self->attempt_) return;
      ++self->attempt_;  // the pending look-up or connect now belongs to a finished attempt
      error_code ignored;
      self->socket_.close(ignored);
      self->lookup_.cancel();
      self->retry("no answer within " + text::seconds(kAttemptLimit), /*rotate=*/true);
    });
  }

  // A name that does not resolve is worth saying at once, at the default level: it is usually a typo or
  // a node list ddprun misread, and the rest of --rdzv-timeout would otherwise pass in silence.
  void say_unresolved(const std::string& why) {
    if (said_unresolved_) return;
    said_unresolved_ = true;
    logger_.warning("cannot resolve the rendezvous host \"", config_.server_host, "\": ", why,
                    "; retrying until the rendezvous timeout (name it with --master-addr or --rdzv-endpoint)");
  }

  void connect_to(const tcp::endpoint& endpoint, unsigned attempt) {
    error_code ignored;
    socket_.close(ignored);
    socket_.async_connect(endpoint, [self = shared_from_this(), attempt](error_code ec) {
      if (self->done_ || attempt != self->attempt_) return;
      if (ec) {
        self->attempt_timer_.cancel();
        return self->retry(ec.message(), /*rotate=*/true);
      }
      self->attempt_timer_.cancel();
      self->connected_at_ = Clock::now();
      error_code opt_ec;
      self->socket_.set_option(tcp::no_delay(true), opt_ec);
      self->last_heard_ = StallClock::now();
      self->connected_ = true;
      self->read_some();
      self->schedule_heartbeat();
    });
  }

  // The server may not be up yet (node 0 starts it): retry with backoff until connect_timeout.
  // rotate: with candidate ports, the next attempt tries the next one (the server was not found at this one).
  void retry(const std::string& why, bool rotate = false) {
    const auto now = Clock::now();
    if (now >= connect_deadline_) {
      const std::string ports = candidates() ? " (ports " + port_list() + ")" : "";
      std::string name = name_problem_.empty() || name_problem_ == why
                             ? ""
                             : "; the name \"" + config_.server_host + "\" did not resolve: " + name_problem_;
      return fail(ErrorKind::kTimeout, "could not reach the rendezvous server at " + where() + ports + " within " +
                                           text::seconds(connect_limit_) + ": " + why + name);
    }
    logger_.debug("rendezvous server at ", where(), " not reachable yet (", why, "); retrying");
    if (rotate) next_port();
    // The last wait is cut to the deadline, where one more attempt is made: the timeout the user gave is the
    // time ddprun keeps trying, not up to one back-off step less.
    retry_timer_.expires_after(std::min(std::chrono::duration_cast<Clock::duration>(retry_delay_),
                                        connect_deadline_ - now));
    retry_delay_ = std::min(retry_delay_ * 2, kMaxRetry);
    retry_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->done_) self->connect();
    });
  }

  void read_some() {
    socket_.async_read_some(asio::buffer(read_buffer_), [self = shared_from_this(), attempt = attempt_](
                                                            error_code ec, std::size_t n) {
      // A connection abandoned before its challenge (candidate ports) still completes its read, aborted:
      // it must not touch the next connection.
      if (self->done_ || attempt != self->attempt_) return;
      if (ec && self->leaving_) return self->fail(ErrorKind::kUnavailable, self->cannot_join_);
      if (ec && !self->challenged_ && Clock::now() < self->connect_deadline_) {
        // Closed before its challenge: a server at its connection limit (a flood of strangers) or still
        // starting. Not a lost server yet: connect again, within the connect deadline.
        return self->abandon_connection("closed before the challenge");
      }
      if (ec) {
        return self->fail(ErrorKind::kLostServer, "lost the rendezvous server at " + self->where() + ": " +
                                                      (ec == asio::error::eof ? "connection closed" : ec.message()));
      }
      self->last_heard_ = StallClock::now();
      try {
        self->decoder_.feed(std::string_view(self->read_buffer_.data(), n));
        while (auto payload = self->decoder_.next()) {
          self->handle(decode_server_message(*payload));
          if (self->done_ || attempt != self->attempt_) return;  // ended, or abandoned (another job's server)
        }
      } catch (const ProtocolError& e) {
        return self->fail(ErrorKind::kProtocol, "bad message from the rendezvous server at " + self->where() +
                                                    ": " + e.what());
      }
      self->read_some();
    });
  }

  void handle(ServerMessage message) {
    if (auto* challenge = std::get_if<ChallengeMsg>(&message)) return on_challenge(*challenge);
    if (!hello_sent_) throw ProtocolError("expected a challenge first");
    if (auto* error = std::get_if<ErrorMsg>(&message)) {
      if (leaving_) return fail(ErrorKind::kUnavailable, cannot_join_);
      std::string prefix = error->kind == ErrorKind::kRefused ? "the rendezvous server refused this node: " : "";
      return fail(error->kind, prefix + error->message);
    }
    if (auto* assignment = std::get_if<Assignment>(&message)) {
      if (handlers_.on_assignment) handlers_.on_assignment(*assignment);
    } else if (auto* stop = std::get_if<StopMsg>(&message)) {
      StopOrder order{std::move(stop->root_cause), std::move(stop->reason), stop->restarting, stop->membership};
      if (!order.restarting) close();  // final: nothing more to hear, and the server's going away is expected
      if (handlers_.on_stop) handlers_.on_stop(order);
    } else if (std::holds_alternative<CompleteMsg>(message)) {
      close();
      if (handlers_.on_job_complete) handlers_.on_job_complete();
    } else if (std::holds_alternative<CaptureMsg>(message)) {
      if (handlers_.on_capture) handlers_.on_capture();
    } else if (auto* view = std::get_if<JobViewMsg>(&message)) {
      if (handlers_.on_job_view) handlers_.on_job_view(*view);
    } else if (auto* named = std::get_if<StragglersMsg>(&message)) {
      if (handlers_.on_stragglers) handlers_.on_stragglers(*named);
    }
  }

  void on_challenge(const ChallengeMsg& challenge) {
    if (hello_sent_) throw ProtocolError("a second challenge");
    challenged_ = true;
    if (challenge.protocol != kProtocolName || challenge.version != kProtocolVersion)
      return fail(ErrorKind::kProtocol, "the rendezvous server at " + where() + " speaks " + challenge.protocol +
                                            " v" + std::to_string(challenge.version) + "; this ddprun speaks " +
                                            kProtocolName + " v" + std::to_string(kProtocolVersion));
    if (challenge.heartbeat_interval_ms <= 0 || challenge.heartbeat_timeout_ms <= challenge.heartbeat_interval_ms)
      throw ProtocolError("nonsensical heartbeat settings in the challenge");
    // Candidate ports: another job's server (another step of the allocation) is passed by before this node
    // says anything to it; so is a server that is not a ddprun of this version.
    if (candidates() && !verify_server_proof(config_.token, challenge.nonce, config_.run_id, challenge.proof))
      return abandon_connection("the server at " + where() + " belongs to another job");
    heartbeat_interval_ = milliseconds(challenge.heartbeat_interval_ms);
    heartbeat_timeout_ = milliseconds(challenge.heartbeat_timeout_ms);
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
    hello_sent_ = true;
    outbox_.push_back(encode_frame(encode(ClientMessage{hello}), config_.max_frame_bytes));
    for (auto& frame : pending_) outbox_.push_back(std::move(frame));
    pending_.clear();
    if (!writing_) write_next();
    schedule_heartbeat();  // now at the server's interval, replacing the handshake watchdog's wait
  }

  void write_next() {
    if (outbox_.empty() && leaving_ && !done_) return fail(ErrorKind::kUnavailable, cannot_join_);  // said
    if (outbox_.empty() || done_ || !connected_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    asio::async_write(socket_, asio::buffer(outbox_.front()), [self = shared_from_this()](error_code ec, std::size_t) {
      if (self->done_) return;
      if (ec) return self->fail(ErrorKind::kLostServer, "lost the rendezvous server at " + self->where() + ": " +
                                                             ec.message());
      self->outbox_.pop_front();
      self->write_next();
    });
  }

  // One timer: sends heartbeats and notices a silent server.
  void schedule_heartbeat() {
    heartbeat_timer_.expires_after(hello_sent_ ? heartbeat_interval_ : kHandshakeInterval);
    heartbeat_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->done_) return;
      // The handshake is part of getting in: a server that accepts but never sends its challenge (wedged,
      // or not a rendezvous server) is bounded by the same deadline as connecting.
      if (!self->challenged_ && self->candidates() && Clock::now() - self->connected_at_ >= kCandidateChallengeLimit)
        return self->abandon_connection("the listener at " + self->where() + " sent no challenge within " +
                                        text::seconds(kCandidateChallengeLimit));
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
      milliseconds timeout = self->hello_sent_ ? self->heartbeat_timeout_ : kHandshakeTimeout;
      if (StallClock::now() - self->last_heard_ > timeout)
        return self->fail(ErrorKind::kLostServer, "lost the rendezvous server at " + self->where() +
                                                      ": nothing heard for " + text::seconds(timeout));
      if (self->hello_sent_) self->send(HeartbeatMsg{});
      self->schedule_heartbeat();
    });
  }

  void fail(ErrorKind kind, const std::string& message) {
    if (done_) return;
    close();
    // A node that cannot take part ends for that reason, whether or not the others could be told.
    if (!cannot_join_.empty() && kind != ErrorKind::kUnavailable)
      return report(ClientError{ErrorKind::kUnavailable, cannot_join_ + " (the rendezvous could not be told: " +
                                                             message + ")"});
    report(ClientError{kind, message});
  }

  void report(const ClientError& error) {
    if (handlers_.on_error) handlers_.on_error(error);
  }

  std::string port_list() const {
    std::string out;
    for (std::uint16_t p : ports_) out += (out.empty() ? "" : ", ") + std::to_string(p);
    return out;
  }

  static std::string local_hostname() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
    return name;
  }

  ClientConfig config_;
  ClientHandlers handlers_;
  Logger logger_;
  NameLookup lookup_;
  tcp::socket socket_;
  asio::steady_timer retry_timer_;
  asio::steady_timer attempt_timer_;
  asio::steady_timer heartbeat_timer_;
  FrameDecoder decoder_;
  std::array<char, 1024> read_buffer_{};
  std::deque<std::string> outbox_;
  std::vector<std::string> pending_;  // reports made before the hello went out
  Clock::time_point connect_deadline_;
  milliseconds connect_limit_{0};
  Clock::time_point connected_at_;
  std::vector<std::uint16_t> ports_;  // server_port, then more_ports
  std::size_t port_index_ = 0;
  std::string name_problem_;  // the name look-up's last failure, for the final message
  std::string cannot_join_;   // this node cannot take part: why (ClientConfig::cannot_join, or no MUNGE here)
  bool leaving_ = false;      // the hello saying cannot_join is out: the connection's end is ours
  Clock::time_point last_heard_;
  milliseconds retry_delay_ = kFirstRetry;
  milliseconds heartbeat_interval_ = kHandshakeInterval;
  milliseconds heartbeat_timeout_ = kHandshakeTimeout;
  bool connected_ = false;
  bool challenged_ = false;  // the server spoke: from now on a closed connection is a lost server
  unsigned attempt_ = 0;  // numbers connect attempts, so a late answer to an abandoned one is ignored
  bool said_unresolved_ = false;
  bool hello_sent_ = false;
  bool writing_ = false;
  bool done_ = false;
};

Client::Client(asio::io_context& io, ClientConfig config, ClientHandlers handlers, Logger logger)
    : impl_(std::make_shared<Impl>(io, std::move(config), std::move(handlers), std::move(logger))) {}
Client::~Client() { impl_->close(); }
void Client::start() { impl_->start(); }
void Client::report_failure(const Failure& failure) { impl_->send(FailureMsg{failure}); }
void Client::report_node_done() { impl_->send(NodeDoneMsg{}); }
void Client::report_stopped() { impl_->report_stopped(); }
void Client::report_hang_view(const HangViewMsg& view) { impl_->send(view); }
void Client::report_status(std::string status_json, std::vector<RankPace> paces) {
  impl_->send(NodeStatusMsg{std::move(status_json), std::move(paces)});
}
void Client::request_view() { impl_->send(ViewRequestMsg{}); }
void Client::close() { impl_->close(); }

}  // namespace ddprun::rendezvous
