#include "rendezvous/server.hpp"

#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <map>
#include <unordered_map>

#include "common/error.hpp"
#include "common/stall_clock.hpp"
#include "rendezvous/text.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/listener.hpp"
#include "rendezvous/munge_auth.hpp"
#include "rendezvous/server_connection.hpp"
#include "rendezvous/server_live_view.hpp"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

constexpr int kAcceptBurst = 1024;  // connections taken per turn of the loop at most (accept_waiting)
// At the pending-connection limit, one connection is taken per this period (each closes a waiting one: accept()).
constexpr std::chrono::microseconds kAdmitPace{250};

class Server::Impl final : public ConnectionOwner, public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, JobConfig config, Logger logger)
      : io_(io), logger_(logger.for_part("rendezvous")), state_(sized(std::move(config)), StallClock::now()),
        acceptor_(io), tick_timer_(io), accept_retry_timer_(io), drain_timer_(io) {
    tick_period_ = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  state_.config.heartbeat_interval / 4),
                              std::chrono::milliseconds(5), std::chrono::milliseconds(250));
  }

  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  virtual ~Impl() = default;

  // The job's heartbeat interval for its size (heartbeat_interval_for), said when it is not the one given. Called
  // in the constructor's list, after logger_ (declared before state_).
  JobConfig sized(JobConfig config) const {
    const std::chrono::milliseconds given = config.heartbeat_interval;
    config.heartbeat_interval = heartbeat_interval_for(config);
    if (config.heartbeat_interval != given)
      logger_.info("up to ", config.max_nodes, " nodes: agents beat every ", config.heartbeat_interval.count(),
                   " ms, not every ", given.count(), " ms (--heartbeat-interval), so that the server receives at most ",
                   kMaxHeartbeatsPerSecond, " heartbeats a second");
    return config;
  }

  void start(const std::string& bind_address, std::uint16_t port, bool announce) {
    acceptor_ = open_listener(io_, bind_address, port);
    acceptor_.non_blocking(true);  // accept_waiting()
    state_.started = StallClock::now();  // the join timeout counts from here
    bind_address_ = bind_address;
    if (announce) this->announce();
    accept();
    tick();
  }

  void announce() {
    logger_.info("rendezvous server for run \"", state_.config.run_id, "\" listening on ",
                 listening_on(acceptor_, bind_address_), ", expecting ", expected_nodes(), " nodes",
                 state_.config.require_munge ? ", each with a MUNGE credential of uid " + std::to_string(::geteuid())
                                             : std::string());
    // Without a secret token anyone who reaches the port can join: say so where the operator looks. MUNGE keeps
    // other users out, which is what the warning is about; the same user was never kept out.
    const JobConfig& c = state_.config;
    if ((c.public_token || is_run_id_token(c.token, c.run_id)) && !c.require_munge)
      if (std::string warning = open_without_token_warning(acceptor_, bind_address_, c.run_id); !warning.empty())
        logger_.warning(warning);
  }

  void remember(RememberedRound round) { state_.config.remembered = std::move(round); }

  std::uint16_t port() const {
    error_code ec;
    auto endpoint = acceptor_.local_endpoint(ec);
    return ec ? 0 : endpoint.port();
  }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    tick_timer_.cancel();
    accept_retry_timer_.cancel();
    auto conns = std::move(conns_);
    conns_.clear();
    for (auto& [id, conn] : conns) {
      conn->detach();
      conn->close("server stopped");
    }
    fire_drained();
  }

  void async_wait_drained(std::chrono::milliseconds max_wait, std::function<void()> done) {
    drain_done_ = std::move(done);
    drain_timer_.expires_after(max_wait);
    drain_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec != asio::error::operation_aborted) self->fire_drained();
    });
    check_drained();
  }

  void async_wait_job_end(std::function<void()> done) {
    job_end_ = std::move(done);
    check_job_end();
  }

  void keep_rounds(std::function<void(const RememberedRound&)> keep) { keep_round_ = std::move(keep); }
  void gate_rounds(RoundGate confirm) { gate_ = std::move(confirm); }
  void fence_rounds(std::int64_t token) { fence_ = token; }
  void lease_standing(bool lapsing) {
    if (!stopped_) run(LeaseStanding{lapsing});
  }

  // What every connection is told first; the connection's proof covers its settings (issue 55: a relay replayed a
  // challenge with a 24 h heartbeat timeout, and the agents waited on it).
  ChallengeMsg challenge_for(const std::string& nonce) const {
    ChallengeMsg challenge;
    challenge.nonce = nonce;
    challenge.heartbeat_interval_ms = state_.config.heartbeat_interval.count();
    challenge.heartbeat_timeout_ms = state_.config.heartbeat_timeout.count();
    challenge.munge = state_.config.require_munge;
    challenge.resumable = state_.config.resumable;  // issue 19: no agent hosts it, agents may come back
    challenge.proof = compute_server_proof(state_.config.token, nonce, state_.config.run_id);
    return challenge;
  }

  // The hello's seal: opened, the connection is sealed both ways from now on (true); not (another token, or bytes
  // changed on the way), refused as a hello with a wrong token is, in the clear, and closed (false).
  bool open_hello(ServerConnection& conn, std::string& payload) {
    const auto& c = state_.config;
    auto in = std::make_unique<FrameSeal>(c.token, conn.nonce, conn.agent_nonce, c.run_id,
                                          FrameSeal::Direction::kAgentToServer);
    if (!in->open(payload)) {
      logger_.warning("refused node from ", conn.peer_address(), ": its hello's seal does not match (wrong token, ",
                      "or altered on the way)");
      conn.send(std::make_shared<const std::string>(
          encode_frame(encode(ServerMessage{ErrorMsg{ErrorKind::kRefused, auth_failed_message(c)}}))));
      conn.close_after_flush();
      return false;
    }
    conn.seal(std::move(in), std::make_unique<FrameSeal>(c.token, conn.nonce, conn.agent_nonce, c.run_id,
                                                         FrameSeal::Direction::kServerToAgent));
    return true;
  }

  void on_payload(std::uint64_t id, std::string payload) override {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    auto conn = it->second;  // a copy: closing erases the map entry
    ClientMessage message;
    try {
      // The hello is the agent's first sealed frame (frame_seal.hpp): its tag, under keys only the job's token and
      // this connection's two nonces give, proves the agent as the MAC inside it does, and binds everything after.
      if (conn->proved && !conn->greeted && !conn->sealed() && !open_hello(*conn, payload)) return;
      message = decode_client_message(payload);
      if (auto* prove = std::get_if<ProveMsg>(&message)) {  // before the hello, once: this connection's proof
        if (conn->greeted || conn->proved) throw ProtocolError("a second or late request for proof");
        conn->proved = true;
        conn->agent_nonce = prove->nonce;
        ProofMsg proof{compute_connection_proof(state_.config.token, conn->nonce, prove->nonce, state_.config.run_id,
                                                challenge_settings(challenge_for(conn->nonce)))};
        conn->send(std::make_shared<const std::string>(encode_frame(encode(ServerMessage{proof}))));
        return;
      }
      if (!conn->greeted && !std::holds_alternative<HelloMsg>(message))
        throw ProtocolError("expected a hello first");
      if (!conn->sealed()) throw ProtocolError("a hello before this connection's proof (an agent of another version?)");
    } catch (const ProtocolError& e) {
      logger_.warning("closing connection from ", conn->peer_address(), ": ", e.what());
      conn->close(e.what());
      return;
    }
    std::visit(
        [&](auto& m) {
          using T = std::decay_t<decltype(m)>;
          if constexpr (std::is_same_v<T, HelloMsg>) {
            if (!first_hello_) first_hello_ = Clock::now();
            if (!conn->greeted) ++greeted_open_;
            conn->greeted = true;
            Hello hello{id, conn->nonce, std::move(m), conn->peer_address(), conn->local_address(), false, {}};
            if (state_.config.require_munge) check_munge(hello);
            run(std::move(hello));
            if (!conn->joined && state_.nodes.count(id)) {  // accepted: a node now, with a node's limits
              conn->authenticated();
              ++joined_open_;
            }
          } else if constexpr (std::is_same_v<T, HeartbeatMsg>) {
            run(Heartbeat{id});
          } else if constexpr (std::is_same_v<T, FailureMsg>) {
            run(FailureReport{id, std::move(m.failure)});
          } else if constexpr (std::is_same_v<T, NodeDoneMsg>) {
            run(NodeDone{id, m.noticed});
          } else if constexpr (std::is_same_v<T, HangViewMsg>) {
            run(HangReport{id, std::move(m)});
          } else if constexpr (std::is_same_v<T, NodeStatusMsg>) {
            if (auto node = state_.nodes.find(id); node != state_.nodes.end()) {
              const NodeEntry& n = node->second;
              if (own_paces(m.paces, n.rank_offset, n.rank_offset < 0 ? 0 : n.nproc) > 0 && !conn->said_foreign_paces) {
                conn->said_foreign_paces = true;  // once per connection: an insider must not flood the log
                logger_.warning("node ", n.node_rank, " (host \"", n.host, "\") reported paces of ranks that are not "
                                "its own: ignored");
              }
              live_view_.on_status(id, n.node_rank, n.host, std::move(m), Clock::now());
            }
          } else if constexpr (std::is_same_v<T, ViewRequestMsg>) {
            if (state_.nodes.count(id)) answer_view(*conn);
          } else if constexpr (std::is_same_v<T, ProveMsg>) {
            // answered before the hello, above
          } else if constexpr (std::is_same_v<T, RoundReadyMsg>) {
            run(RoundReady{id, m.round});
          } else {
            static_assert(std::is_same_v<T, StoppedMsg>);
            run(NodeStopped{id, m.master_port});
          }
        },
        message);
  }

  void on_closed(std::uint64_t id, const std::string& reason) override {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    bool greeted = it->second->greeted;
    const bool reset = it->second->reset_by_peer;
    if (it->second->joined) --joined_open_;
    conns_.erase(it);
    // Its status goes whether or not the state machine still counts the node (one it dropped for silence is no
    // longer among its nodes: issue 32, its old incarnation stayed in every view as a phantom row).
    const auto node = state_.nodes.find(id);
    live_view_.forget(id, node == state_.nodes.end() ? -1 : node->second.node_rank);
    if (!greeted) return;
    --greeted_open_;
    run(Disconnected{id, reason, woke_lately(), reset});
    check_drained();
  }

  const RendezvousState& state() const { return state_; }

  // Whether this process was stopped within the last heartbeat timeout. Asked as a connection closes: on a wake the
  // sockets may be read before the tick that notices the stop, so the overdue tick is looked at here too.
  bool woke_lately() {
    if (StallClock::note_late(tick_timer_.expiry(), Clock::now()).count() > 0) woke_at_ = Clock::now();
    return woke_at_ && Clock::now() - *woke_at_ < state_.config.heartbeat_timeout;
  }

  // Straggler naming (straggler_watch.hpp): every node of the round hears who is named now.
  void tell_stragglers(std::optional<StragglersMsg> message) {
    if (!message) return;
    Frame frame = frame_of(*message);
    for (const auto& [id, node] : state_.nodes)
      if (auto* conn = find(id); conn && node.node_rank >= 0) conn->send(frame);
  }
  void cannot_start(Failure failure) { run(CannotStart{std::move(failure)}); }
  std::size_t connection_count() const { return conns_.size(); }

 private:
  static Now now() {
    auto wall = std::chrono::system_clock::now().time_since_epoch();
    return Now{StallClock::now(), std::chrono::duration_cast<std::chrono::milliseconds>(wall).count()};
  }

  std::string expected_nodes() const {
    const JobConfig& c = state_.config;
    return c.min_nodes == c.max_nodes ? std::to_string(c.max_nodes)
                                      : std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes);
  }

  // The round trip to munged happens here, on the loop (~0.1 ms), once per hello; the verdict goes to the
  // state machine with the hello. The job's user is the server's own uid. A hello whose MAC already fails is
  // refused anyway: with a secret token, strangers cannot make the server wait on munged.
  void check_munge(Hello& hello) const {
    if (!verify_mac(state_.config.token, hello.nonce, state_.config.run_id, hello.hello.mac)) {
      hello.munge_problem = "MUNGE credential not checked: the token or run id failed first";
      return;
    }
    const MungeCheck check = check_munge_credential(state_.config.munge_socket, hello.hello.munge_credential,
                                                    hello.nonce, state_.config.run_id, ::geteuid());
    hello.munge_ok = check.ok;
    hello.munge_problem = check.problem;
  }

  void accept() {
    acceptor_.async_accept([self = shared_from_this()](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || self->stopped_) return;
      if (ec) {
        // Out of descriptors: back off instead of spinning; the waiting nodes stay in the listen queue and are
        // admitted once a descriptor is free (else --rdzv-timeout ends the wait). Said once, then every 10 s.
        const auto now = std::chrono::steady_clock::now();
        if (self->accept_failures_++ == 0 || now - self->accept_failure_said_ > std::chrono::seconds(10)) {
          self->accept_failure_said_ = now;
          const bool descriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE;
          self->logger_.warning("cannot accept a node's connection: ", ec.message(),
                                descriptors ? " (ulimit -n is too low for this rendezvous server: raise it)" : "",
                                self->accept_failures_ > 1 ? "; failed " + std::to_string(self->accept_failures_) +
                                                                 " times so far, retrying every 50 ms"
                                                           : "; retrying every 50 ms");
        }
        self->accept_retry_timer_.expires_after(std::chrono::milliseconds(50));
        self->accept_retry_timer_.async_wait([self](error_code wait_ec) {
          if (!wait_ec && !self->stopped_) self->accept();
        });
        return;
      }
      self->accept_failures_ = 0;
      self->on_accept(std::move(socket));
      if (self->at_pending_limit()) {
        // Beyond the limit every newcomer costs a waiting connection: at most one per kAdmitPace, so that an agent
        // accepted mid-flood has its handshake read before 1 024 newer connections push it out (issue 55: a burst
        // of accepts evicted every handshake in one turn of the loop). The rest wait in the listen queue.
        self->accept_retry_timer_.expires_after(kAdmitPace);
        self->accept_retry_timer_.async_wait([self](error_code wait_ec) {
          if (!wait_ec && !self->stopped_) self->accept();
        });
        return;
      }
      self->accept_waiting();
      self->accept();
    });
  }

  bool at_pending_limit() const { return conns_.size() - joined_open_ >= pending_connection_limit(state_.config); }

  // Takes the connections already waiting (up to a burst) in this turn of the loop: taken one per turn, they
  // could fill the kernel's accept queue (net.core.somaxconn) while the loop read hellos, and a SYN dropped there
  // costs its agent a 1 s retransmission. An error (EMFILE) is left to the asynchronous accept, which backs off.
  void accept_waiting() {
    for (int i = 0; i < kAcceptBurst && !stopped_ && !at_pending_limit(); ++i) {
      error_code ec;
      tcp::socket socket = acceptor_.accept(ec);  // the acceptor is non-blocking: would_block when none waits
      if (ec) return;
      on_accept(std::move(socket));
    }
  }

  void on_accept(tcp::socket socket) {
    // At the limit and nobody to evict (every waiting connection is a handshake under way): the newcomer goes.
    if (at_pending_limit() && !evict_a_stranger()) {
      error_code ignored;
      socket.close(ignored);
      return;
    }
    std::uint64_t id = next_id_++;
    auto conn = std::make_shared<ServerConnection>(std::move(socket), id, state_.config.max_frame_bytes,
                                                   state_.config.max_outbox_bytes, this);
    conn->nonce = generate_nonce();
    conns_.emplace(id, conn);
    handshakes_.emplace_back(Clock::now() + state_.config.heartbeat_timeout, id);
    conn->send(std::make_shared<const std::string>(encode_frame(encode(ServerMessage{challenge_for(conn->nonce)}))));
    conn->start();
  }

  // At the connection limit: closes a connection that has not joined, preferring one already refused, then the
  // oldest that has not asked for the server's proof (an agent asks as soon as the challenge reaches it: one whole
  // frame, where a stranger idles or sends part of one), then the oldest whose hello has not come whole. Not the
  // silent first: a newly accepted agent is silent until its request arrives, and strangers that had each sent a
  // byte outlived it (measured with scripts/bench/rdzv_hostile.py). Never a node of the job, nor one whose hello has
  // come (issue 55: strangers holding 1 500-3 000 idle connections had the agents' connections evicted
  // mid-handshake, and the job failed). False when there is none to close.
  bool evict_a_stranger() {
    enum class Pick { kAny, kUnproved, kBeforeHello };
    auto evict_from = [this](std::deque<std::pair<Clock::time_point, ConnId>>& queue, Pick pick) {
      for (auto entry = queue.begin(); entry != queue.end();) {
        auto it = conns_.find(entry->second);
        // Gone, joined, or (waiting for a hello) past it: nothing to evict here, nor to sweep for a missing hello.
        if (it == conns_.end() || it->second->joined || (pick != Pick::kAny && it->second->greeted)) {
          entry = queue.erase(entry);
          continue;
        }
        if (pick == Pick::kUnproved && it->second->proved) {
          ++entry;
          continue;
        }
        auto conn = it->second;
        queue.erase(entry);
        conn->close("too many connections waiting to join");
        return true;
      }
      return false;
    };
    if (!evict_from(lingering_, Pick::kAny) && !evict_from(handshakes_, Pick::kUnproved) &&
        !evict_from(handshakes_, Pick::kBeforeHello))
      return false;
    ++evicted_;
    auto now_steady = Clock::now();
    if (now_steady - last_evict_log_ >= std::chrono::seconds(10)) {
      // Once per 10 s, not per connection: a flood must not become a flood of log lines.
      logger_.warning(evicted_, " connection(s) closed unheard: more than ", pending_connection_limit(state_.config),
                      " connections at once have not joined (a flood of strangers?); the job's nodes are kept");
      evicted_ = 0;
      last_evict_log_ = now_steady;
    }
    return true;
  }

  void run(const Event& event) {
    for (auto& action : step(state_, event, now())) dispatch(std::move(action));
    check_job_end();
  }

  // gate_rounds: a round's assignments wait for the gate's answer, and whatever follows them waits behind them.
  void dispatch(Action action) {
    if (gated_) return held_.push_back(std::move(action));
    if (!gate_ || !std::holds_alternative<SendAssignments>(action)) return apply(action);
    gated_ = true;
    held_.push_back(std::move(action));
    gate_([weak = weak_from_this()](bool ok) {
      if (auto self = weak.lock()) asio::post(self->io_, [self, ok] { self->open_gate(ok); });
    });
  }

  void open_gate(bool ok) {
    if (stopped_ || !gated_) return;
    gated_ = false;
    auto held = std::move(held_);
    held_.clear();
    if (!ok) return;  // never handed out: the caller resigns (stop)
    apply(held.front());  // the round the gate was asked for
    for (std::size_t i = 1; i < held.size(); ++i) dispatch(std::move(held[i]));  // a later round gates again
    check_job_end();
  }

  bool job_ended() const { return state_.phase == Phase::kComplete || state_.phase == Phase::kStopped; }

  void check_job_end() {
    if (!job_end_ || !job_ended()) return;
    asio::post(io_, std::move(job_end_));
    job_end_ = nullptr;
  }

  // ServerLiveView::kViewEvery: one view built per period, its frame shared by every answer in it.
  void answer_view(ServerConnection& conn) {
    const auto now = Clock::now();
    if (!view_frame_ || now - view_built_at_ >= ServerLiveView::kViewEvery) {
      view_frame_ = frame_of(live_view_.job_view(state_.config.max_frame_bytes, now));
      view_built_at_ = now;
    }
    conn.send(view_frame_);
  }

  Frame frame_of(const ServerMessage& message) const {
    return std::make_shared<const std::string>(encode_frame(encode(message), state_.config.max_frame_bytes));
  }

  ServerConnection* find(ConnId id) const {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
  }

  void apply(const Action& action) {
    if (auto* send = std::get_if<Send>(&action)) {
      if (auto* conn = find(send->conn)) conn->send(frame_of(send->message));
    } else if (auto* assign = std::get_if<SendAssignments>(&action)) {
      live_view_.new_round();
      const auto sending_from = Clock::now();
      Round stamped = assign->round;
      stamped.fence = fence_;
      std::string round = encode_round(stamped);  // once for every node
      for (const Slot& slot : assign->slots)
        if (auto* conn = find(slot.conn))
          conn->send(std::make_shared<const std::string>(
              encode_frame(encode_assignment(round, slot.node_rank, slot.rank_offset))));
      if (first_hello_ && !first_round_timed_) {  // the scale benchmark's figure (scripts/bench/rdzv_scale.sh)
        first_round_timed_ = true;
        auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
        logger_.info("assignments handed to ", assign->slots.size(), " nodes ", ms(Clock::now() - *first_hello_),
                     " ms after the first hello (", ms(sending_from - *first_hello_), " ms to the last hello, ",
                     ms(Clock::now() - sending_from), " ms to send)");
      }
    } else if (auto* broadcast = std::get_if<Broadcast>(&action)) {
      Frame frame = frame_of(broadcast->message);
      for (ConnId id : broadcast->conns)
        if (auto* conn = find(id)) conn->send(frame);
    } else if (auto* close = std::get_if<Close>(&action)) {
      live_view_.forget(close->conn, -1);  // a node the server let go is no part of the job's view
      if (auto* conn = find(close->conn); conn && !conn->closing()) {
        conn->close_after_flush();
        lingering_.emplace_back(Clock::now() + state_.config.heartbeat_timeout, close->conn);
      }
    } else if (auto* log = std::get_if<Log>(&action)) {
      logger_.write(log->level, log->text);
    } else if (auto* remember = std::get_if<RememberRound>(&action)) {
      if (keep_round_) keep_round_(remember->round);
    }
  }

  void tick() {
    tick_timer_.expires_after(tick_period_);
    tick_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec == asio::error::operation_aborted || self->stopped_) return;
      // A tick late by a stop of this process: the nodes' silence during it is ours, not theirs
      // (common/stall_clock.hpp); the state machine's clock leaves it out.
      const auto stall = StallClock::note_late(self->tick_timer_.expiry(), Clock::now());
      if (stall.count() > 0) self->woke_at_ = Clock::now();
      if (stall.count() > 0)
        self->logger_.info("this process did not run for ",
                           text::seconds(std::chrono::duration_cast<std::chrono::milliseconds>(stall)),
                           " (stopped or frozen): that time is not counted as any node's silence");
      self->run(Tick{});
      self->tell_stragglers(self->live_view_.tick(Clock::now()));
      self->sweep(self->handshakes_, "no hello in time", [](const ServerConnection& c) { return !c.greeted; });
      self->sweep(self->lingering_, "peer did not hang up", [](const ServerConnection&) { return true; });
      self->check_drained();
      self->tick();
    });
  }

  // Closes connections whose deadline in `queue` passed and that still match `overdue`.
  template <typename Predicate>
  void sweep(std::deque<std::pair<Clock::time_point, ConnId>>& queue, const char* why, Predicate overdue) {
    auto now_steady = Clock::now();
    while (!queue.empty() && queue.front().first <= now_steady) {
      ConnId id = queue.front().second;
      queue.pop_front();
      auto it = conns_.find(id);
      if (it == conns_.end() || !overdue(*it->second)) continue;
      auto conn = it->second;
      logger_.debug("closing connection from ", conn->peer_address(), ": ", why);
      conn->close(why);
    }
  }

  void check_drained() {
    if (!drain_done_) return;
    if (job_ended() && greeted_open_ == 0 && !telling_start_failure() && !telling_the_silent(state_)) fire_drained();
  }

  // A start failure ended the job before its first round: nodes still to come are told why as they arrive.
  bool telling_start_failure() const {
    return state_.root_cause && is_start_failure(*state_.root_cause) && !every_node_informed(state_);
  }

  void fire_drained() {
    if (!drain_done_) return;
    drain_timer_.cancel();
    asio::post(io_, std::move(drain_done_));
    drain_done_ = nullptr;
  }

  asio::io_context& io_;
  Logger logger_;
  RendezvousState state_;
  tcp::acceptor acceptor_;
  std::string bind_address_;  // as given to start(), for announce()
  asio::steady_timer tick_timer_;
  asio::steady_timer accept_retry_timer_;
  std::uint64_t accept_failures_ = 0;  // in a row: a starved accept is said once, then every 10 s
  std::chrono::steady_clock::time_point accept_failure_said_{};
  asio::steady_timer drain_timer_;
  std::chrono::milliseconds tick_period_{100};
  std::optional<Clock::time_point> first_hello_;  // the first round's timing in the log starts here
  bool first_round_timed_ = false;
  std::optional<Clock::time_point> woke_at_;  // the last stop of this process seen ended then (woke_lately)
  std::unordered_map<ConnId, std::shared_ptr<ServerConnection>> conns_;
  Frame view_frame_;  // the last job view built (answer_view), shared by every answer within its period
  Clock::time_point view_built_at_{};
  std::deque<std::pair<Clock::time_point, ConnId>> handshakes_;  // pre-hello deadlines, in accept order
  std::deque<std::pair<Clock::time_point, ConnId>> lingering_;   // closing, waiting for the peer's EOF
  std::size_t greeted_open_ = 0;
  std::size_t joined_open_ = 0;  // connections whose hello was accepted; the rest count against the limit
  std::size_t evicted_ = 0;      // closed by the connection limit since the last warning
  Clock::time_point last_evict_log_{};
  ConnId next_id_ = 1;
  bool stopped_ = false;
  ServerLiveView live_view_{state_.config.stragglers};  // after state_, whose config it reads
  std::function<void()> drain_done_;
  std::function<void()> job_end_;
  std::function<void(const RememberedRound&)> keep_round_;  // keep_rounds
  RoundGate gate_;                                          // gate_rounds
  std::int64_t fence_ = 0;                                  // fence_rounds
  bool gated_ = false;        // a round waits for the gate's answer: every action waits behind it (held_)
  std::vector<Action> held_;
};

Server::Server(asio::io_context& io, JobConfig config, Logger logger) {
  validate(config);
  impl_ = std::make_shared<Impl>(io, std::move(config), std::move(logger));
}
Server::~Server() { impl_->stop(); }
void Server::start(const std::string& bind_address, std::uint16_t port, bool announce) {
  impl_->start(bind_address, port, announce);
}
void Server::announce() { impl_->announce(); }
void Server::remember(RememberedRound round) { impl_->remember(std::move(round)); }
std::uint16_t Server::port() const { return impl_->port(); }
void Server::stop() { impl_->stop(); }
void Server::cannot_start(Failure failure) { impl_->cannot_start(std::move(failure)); }
void Server::async_wait_drained(std::chrono::milliseconds max_wait, std::function<void()> done) {
  impl_->async_wait_drained(max_wait, std::move(done));
}
void Server::async_wait_job_end(std::function<void()> done) { impl_->async_wait_job_end(std::move(done)); }
void Server::keep_rounds(std::function<void(const RememberedRound&)> keep) { impl_->keep_rounds(std::move(keep)); }
void Server::gate_rounds(RoundGate confirm) { impl_->gate_rounds(std::move(confirm)); }
void Server::fence_rounds(std::int64_t token) { impl_->fence_rounds(token); }
void Server::lease_standing(bool lapsing) { impl_->lease_standing(lapsing); }
Phase Server::phase() const { return impl_->state().phase; }
const RendezvousState& Server::state() const { return impl_->state(); }
std::size_t Server::connection_count() const { return impl_->connection_count(); }

}  // namespace ddprun::rendezvous
