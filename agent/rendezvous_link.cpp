#include "agent/rendezvous_link.hpp"

#include <boost/asio/ip/tcp.hpp>

#include "common/time.hpp"
#include "rendezvous/errors.hpp"
#include "rendezvous/listener.hpp"
#include "rendezvous/munge_auth.hpp"
#include "rendezvous/recorded_end.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::agent {
namespace rdzv = ddprun::rendezvous;
namespace {

// Whether `host` names an address of this machine: binding it (any port) succeeds only then.
bool is_local_address(boost::asio::io_context& io, const std::string& host) {
  namespace ip = boost::asio::ip;
  boost::system::error_code ec;
  ip::tcp::resolver resolver(io);
  const auto results = resolver.resolve(host, "0", ec);
  if (ec) return false;
  for (const auto& entry : results) {
    ip::tcp::acceptor probe(io);
    probe.open(entry.endpoint().protocol(), ec);
    if (!ec) probe.bind(entry.endpoint(), ec);
    if (!ec) return true;
  }
  return false;
}

// How long node 0's server stays to tell late nodes that the job could not start.
constexpr std::chrono::milliseconds kStartFailureLinger{10'000};
// How long a node that lost its etcd-elected host reads etcd for the job's recorded end before it ends with its own
// verdict (at most read_timeout).
constexpr std::chrono::milliseconds kLearnEndLimit = timeouts::kEtcdLearnEnd;

}  // namespace

int exit_code_of(const rdzv::ClientError& error) {
  switch (error.kind) {
    case rdzv::ErrorKind::kRefused: return kExitRdzvRefused;
    case rdzv::ErrorKind::kTimeout: return kExitRdzvTimeout;
    case rdzv::ErrorKind::kLostServer: return kExitRdzvLost;
    case rdzv::ErrorKind::kProtocol: return kExitRdzvProtocol;
    case rdzv::ErrorKind::kUnavailable: return kExitRdzvUnavailable;
  }
  return kExitRdzvProtocol;
}

RendezvousLink::RendezvousLink(boost::asio::io_context& io, const AgentConfig& config,
                               rdzv::ClientHandlers handlers)
    : io_(io), config_(config), handlers_(std::move(handlers)), log_(config.log.for_part("rendezvous")),
      server_host_(config.rdzv.server_host), server_port_(config.rdzv.server_port) {
  // One node talking to itself: the rendezvous' lines would only repeat the agent's (--verbose shows them).
  if (config.rdzv.job.max_nodes == 1 && config.rdzv.hosting == Hosting::kYes && !log_.enabled(LogLevel::kDebug))
    log_ = Logger(LogLevel::kOff, "rendezvous", "");
}

RendezvousLink::~RendezvousLink() {
  client_.reset();
  server_.reset();
}

std::uint16_t RendezvousLink::server_port() const {
  return server_ ? server_->port() : static_cast<std::uint16_t>(server_port_);
}

// Whether the server hosted here asks every node for a MUNGE credential. Asked for (--rdzv-auth munge) and
// munged silent: the job cannot be authenticated as asked, so hosting fails (exit 69) before any node is
// admitted. Auto: the token alone, as before MUNGE, with a warning; a job that ran yesterday keeps running
// when one node's munged restarts, and a stranger cannot silence our munged to force it without root.
bool RendezvousLink::wants_munge(const RendezvousConfig& r) {
  if (r.munge == MungeUse::kNo) return false;
  const std::string why = rdzv::munge_unavailable_reason(r.job.munge_socket);
  if (why.empty()) return true;
  if (r.munge == MungeUse::kYes)
    throw rdzv::MungeError("--rdzv-auth munge: " + why + " (start munged, or set DDPRUN_MUNGE_SOCKET to its socket)");
  log_.warning("MUNGE authentication is off for this job: ", why, "; nodes prove only the token (--rdzv-auth "
               "munge refuses to start without munged)");
  return false;
}

void RendezvousLink::start() {
  const RendezvousConfig& r = config_.rdzv;
  if (r.hosting == Hosting::kElected) return start_elected(r.job);
  if (r.hosting != Hosting::kNo) {
    rdzv::JobConfig job = r.job;  // validated by the launcher (rendezvous/job_config.cpp)
    // Dynamic mode hosts on every interface once the endpoint is known to be this machine: a host name
    // that resolves to 127.0.1.1 here (Debian's /etc/hosts) must still be reachable from the other nodes.
    // A one-node job has no other nodes: it binds exactly the endpoint, never beyond.
    std::string bind_address = r.bind_address;
    if (r.hosting == Hosting::kIfLocal) {
      if (!is_local_address(io_, r.server_host)) bind_address.clear();
      else if (r.job.max_nodes > 1 && bind_address != "127.0.0.1" && bind_address != "::1" && bind_address != "localhost")
        bind_address = rdzv::kEveryAddress;
    }
    // Only a node that can host asks munged: a joiner's munged matters when the challenge asks for it.
    if (!bind_address.empty()) job.require_munge = wants_munge(r);
    auto server = std::make_unique<rdzv::Server>(io_, job, log_);
    try {
      if (bind_address.empty()) throw rdzv::ConnectionError(r.server_host + " is not an address of this machine");
      listen_on_a_candidate(*server, bind_address);
      server_ = std::move(server);
    } catch (const rdzv::ConnectionError& e) {
      // Dynamic mode: the endpoint is another machine, or a server (ddprun-rendezvous, another agent on
      // this machine) already listens there: join it as a client.
      if (r.hosting == Hosting::kYes) throw;
      log_.debug("not hosting the rendezvous here: ", e.what());
    }
  }
  start_client();
}

void RendezvousLink::start_client() {
  client_retired_ = false;
  client_ = std::make_unique<rdzv::Client>(io_, client_config(), client_handlers(), log_);
  client_->start();
}


void RendezvousLink::listen_on_a_candidate(rdzv::Server& server, const std::string& bind_address) {
  const RendezvousConfig& r = config_.rdzv;
  std::vector<int> ports{r.server_port};
  ports.insert(ports.end(), r.more_server_ports.begin(), r.more_server_ports.end());
  std::string tried;
  for (int port : ports) {
    try {
      server.start(bind_address, static_cast<std::uint16_t>(port));
      if (port != ports.front()) log_.info("the rendezvous listens on port ", port, ", the first free one of ", ports.size(),
                                           " candidates of this SLURM step");
      return;
    } catch (const rdzv::ConnectionError& e) {
      if (ports.size() == 1) throw;
      tried += (tried.empty() ? "" : ", ") + std::to_string(port);
      log_.debug("rendezvous port ", port, " unavailable: ", e.what());
    }
  }
  throw rdzv::ConnectionError("the rendezvous ports of this SLURM step (" + tried + ") are all in use on this node: "
                              "give every node the same free port with --rdzv-port PORT");
}

rdzv::ClientConfig RendezvousLink::client_config() const {
  const RendezvousConfig& r = config_.rdzv;
  rdzv::ClientConfig c;
  c.seat_secret = seat_secret_;
  c.server_host = server_host_;
  c.server_port = server_port();
  // Our own server's port is known; elsewhere node 0 took the first free candidate, which is looked for.
  if (!server_) c.more_ports.assign(r.more_server_ports.begin(), r.more_server_ports.end());
  c.run_id = r.job.run_id;
  c.token = r.job.token;
  c.munge_socket = r.job.munge_socket;
  c.join.node_rank = r.node_rank;
  c.join.nproc = config_.world.local_world_size;
  c.join.host = config_.host;
  c.join.address = r.local_addr;
  c.join.master_port = r.master_port;
  c.join.master_port_fixed = r.master_port_fixed;
  c.join.hosts_server = server_ != nullptr;
  c.connect_timeout = r.job.join_timeout;
  if (r.job.join_grace.count() > 0 && !server_ && 2 * r.job.join_grace < c.connect_timeout) {
    // Every node starts together: a server not found in twice the grace is a node 0 that failed to start.
    c.connect_timeout = 2 * r.job.join_grace;
    c.connect_timeout_option = "twice --join-grace";
  }
  // Joining again after a fence (round_fence.hpp; expect_rejoin sets the window): a server that stays out of reach
  // this long has ended with the job (node 0's own) or is cut off for longer than the job should wait for this node.
  if (rejoining_ && !server_ && rejoin_window_.count() > 0 && rejoin_window_ < c.connect_timeout) {
    c.connect_timeout = rejoin_window_;
    c.connect_timeout_option = "joining again after the loss";
  }
  if (rejoining_) c.join.after_round = rejoin_after_round_;
  // Only toward a server hosted elsewhere; whether it may be restarted, its challenge says.
  if (!server_) c.reconnect_timeout = r.reconnect_timeout;
  // A host elected in etcd listened before it offered itself: unreachable for as long as its lease lasts, it is
  // gone, and another is elected (client_handlers).
  if (r.hosting == Hosting::kElected && !server_ && etcd::ElectionConfig().lease_ttl < c.connect_timeout) {
    c.connect_timeout = etcd::ElectionConfig().lease_ttl;
    c.connect_timeout_option = "the etcd lease of the elected host";
  }
  return c;
}

bool RendezvousLink::announce_start_failure(const std::string& why, std::function<void()> done) {
  const RendezvousConfig& r = config_.rdzv;
  if (r.job.max_nodes <= 1 || r.hosting == Hosting::kIfLocal || r.hosting == Hosting::kElected) return false;
  if (r.hosting == Hosting::kNo) {  // a joiner: say it to node 0's server
    rdzv::ClientConfig c = client_config();
    c.cannot_join = why;
    rdzv::ClientHandlers h;
    h.on_error = [done](const rdzv::ClientError&) { done(); };
    client_ = std::make_unique<rdzv::Client>(io_, c, h, log_);
    client_->start();
    return true;
  }
  // Node 0: a server that only tells (no MUNGE: munged may be why we are here; the token still applies).
  rdzv::JobConfig job = r.job;
  job.require_munge = false;
  auto server = std::make_unique<rdzv::Server>(io_, job, log_);
  try {
    listen_on_a_candidate(*server, r.bind_address);
  } catch (const rdzv::ConnectionError& e) {
    log_.debug("cannot tell the other nodes: ", e.what());
    return false;
  }
  rdzv::Failure failure;
  failure.kind = rdzv::FailureKind::kCannotStart;
  failure.node_rank = r.node_rank.value_or(0);
  failure.host = config_.host;
  failure.exit_code = kExitRdzvUnavailable;
  failure.message = why;
  failure.time_unix_ms = unix_ms();
  server->cannot_start(failure);
  server_ = std::move(server);
  log_.info("telling the other nodes that this one could not start (at most ", kStartFailureLinger.count() / 1000,
            " s)");
  server_->async_wait_drained(kStartFailureLinger, [this, done = std::move(done)] {
    server_->stop();
    done();
  });
  return true;
}

void RendezvousLink::expect_rejoin(const std::string& lost_why) {
  rejoin_expected_ = true;
  rejoin_after_loss_ = "lost the rendezvous server at " + server_host_ + ":" + std::to_string(server_port_) + ": " +
                       lost_why;
  rejoin_window_ = client_ && !client_->server_resumable() ? config_.rdzv.job.heartbeat_timeout
                                                            : config_.rdzv.reconnect_timeout;
  rejoin_after_round_ = client_ ? client_->last_round() : std::nullopt;
}

void RendezvousLink::rejoin() {
  if (client_) client_->close();  // closed already by the stop; its pending handlers see it and do nothing
  rejoin_expected_ = false;
  rejoining_ = true;
  if (config_.rdzv.hosting == Hosting::kElected) return rejoin_elected();
  start_client();
}

void RendezvousLink::finish(std::function<void(const EndInEtcd&)> finished) {
  finishing_ = true;
  if (client_) client_->close();
  std::function<void()> done = [finished] { finished(EndInEtcd{}); };
  // The elected host records the job's end in etcd once the others have heard it, and revokes its leases (the
  // job's other keys go with them). Computed now: the server is stopped by then.
  if (election_) {
    std::string record;
    bool needs_etcd = false;
    if (election_->won() && server_)
      if (auto end = rdzv::recorded_end_of(server_->state(), config_.host, unix_ms())) {
        record = rdzv::encode_recorded_end(config_.rdzv.job.run_id, *end);
        needs_etcd = verdict_needs_etcd(server_->state());
      }
    // A verdict on a node's loss may be this host's own cut-off: it waits for etcd as long as an election would
    // (read_timeout) to record it, or to learn the end the host that replaced it recorded (issue 53).
    const auto patience = needs_etcd ? config_.rdzv.etcd.read_timeout : std::chrono::milliseconds(2000);
    done = [this, record, patience, needs_etcd, finished] {
      election_->finish(record, patience, [this, needs_etcd, finished](const etcd::CoordinatorElection::EndOutcome& o) {
        finished(end_in_etcd(o, needs_etcd));
      });
    };
    // This node lost the host (or never reached it): the job may have ended elsewhere meanwhile, and every node
    // names one root cause (issue 53, invariant 4): the recorded end, when etcd holds one, is this node's too.
    if (lost_host_ && !hosting())
      done = [this, finished] {
        const auto within = std::min(config_.rdzv.etcd.read_timeout, kLearnEndLimit);
        election_->learn_end(within, [this, finished](const etcd::CoordinatorElection::EndOutcome& o) {
          finished(end_in_etcd(o, /*needs_etcd=*/false));
        });
      };
  }
  // A candidate that never won (etcd out of reach, say): nobody knows its server, there is nothing to drain.
  if (election_ && !election_->won() && server_) {
    server_->stop();
    server_.reset();
  }
  if (!server_) {
    done();
    return;
  }
  // Ended by a node that could not start: the nodes not yet here are told as they come (server.hpp). Ended by a
  // node's silence: it may have been cut off, not dead, and asks for one heartbeat timeout (client_reconnect.hpp);
  // every node then ends with the same root cause. What it costs: this node ends up to that much later when the
  // silent node was dead indeed.
  const auto& state = server_->state();
  const auto& cause = state.root_cause;
  auto wait = cause && rdzv::is_start_failure(*cause) ? kStartFailureLinger : std::chrono::milliseconds(2000);
  if (rdzv::telling_the_silent(state)) {
    wait = state.config.heartbeat_timeout;  // the cut node's own window (client_reconnect.hpp): no longer
    log_.info("waiting up to ", rdzv::text::seconds(wait), " for the node judged lost for its silence to come back "
              "and hear how the job ended (a cut link may heal)");
  }
  finish_done_ = std::move(done);
  server_->async_wait_drained(wait, [this] { cut_finish_short(); });
}

// Said by the server's state at the end: the root cause is a node's loss, or a node judged lost for its silence
// was not told. Then this host may itself be the one cut off, and only etcd can say whose verdict is the job's.
bool RendezvousLink::verdict_needs_etcd(const rdzv::RendezvousState& state) {
  const bool node_lost = state.root_cause && state.root_cause->kind == rdzv::FailureKind::kNodeLost;
  return node_lost || !state.untold_silent.empty();
}

EndInEtcd RendezvousLink::end_in_etcd(const etcd::CoordinatorElection::EndOutcome& o, bool needs_etcd) const {
  using Kind = etcd::CoordinatorElection::EndOutcome::Kind;
  EndInEtcd e;
  if (o.kind == Kind::kRecorded || (o.kind == Kind::kNotRecorded && !needs_etcd)) return e;
  if (o.kind == Kind::kRecordedElsewhere) {
    std::string problem;
    e.recorded = rdzv::decode_recorded_end(o.record, config_.rdzv.job.run_id, problem);
    if (!e.recorded) e.unconfirmed = "etcd: " + problem;
    return e;
  }
  e.unconfirmed = "this node's verdict on a lost node could not be recorded in etcd (" + o.why +
                  "): this node may itself have been the one cut off, and the job's outcome is decided where etcd "
                  "has a quorum; check the other nodes' logs";
  return e;
}

bool RendezvousLink::cut_finish_short() {
  if (election_ && election_->cut_finish_short()) return true;
  if (!finish_done_) return false;
  server_->stop();
  std::function<void()> done = std::move(finish_done_);
  finish_done_ = nullptr;
  done();
  return true;
}

}  // namespace ddprun::agent
