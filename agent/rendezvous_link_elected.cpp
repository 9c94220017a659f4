// RendezvousLink with --rdzv-backend etcd (Hosting::kElected): which agent hosts the job's rendezvous is decided in
// etcd (etcd/coordinator_election.hpp), and decided again when the host is gone before the job formed.
#include <algorithm>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "agent/rendezvous_link.hpp"
#include "common/json_depth.hpp"
#include "rendezvous/listener.hpp"
#include "rendezvous/recorded_end.hpp"
#include "rendezvous/remembered_round.hpp"

namespace ddprun::agent {
namespace rdzv = ddprun::rendezvous;

namespace {
// How long a host tries to renew its lease before a round (common/timeouts.hpp: within a keep-alive period and the
// heartbeat timeout the nodes give it while the round's actions wait behind the renewal).
constexpr std::chrono::milliseconds kConfirmLeaseLimit = timeouts::kEtcdConfirmLease;
}  // namespace

void RendezvousLink::start_elected(rdzv::JobConfig job) {
  job.require_munge = wants_munge(config_.rdzv);
  // A host lost while the job runs is replaced (client_handlers): its server is one the nodes come back to, as to
  // a restarted ddprun-rendezvous, only at the new host's address.
  job.resumable = true;
  job.reconnect_grace = config_.rdzv.reconnect_timeout;
  elected_job_ = std::move(job);
  elected_since_ = std::chrono::steady_clock::now();
  elect(/*taking_over=*/false);
}

etcd::ElectionConfig RendezvousLink::election_config() const {
  const RendezvousConfig& r = config_.rdzv;
  etcd::ElectionConfig ec;
  ec.key_prefix = r.etcd.key_prefix;
  ec.run_id = r.job.run_id;
  ec.give_up_after = r.etcd.read_timeout;
  // A node late by up to its own --rdzv-timeout still learns how the job ended.
  ec.end_ttl = std::max(std::chrono::seconds(60), std::chrono::duration_cast<std::chrono::seconds>(r.job.join_timeout));
  ec.tls = {r.etcd.https, r.etcd.cacert, r.etcd.cert, r.etcd.key};
  return ec;
}

// Every agent listens first (a free port on every address, or --local-addr's), so that the value it offers names
// a server that already exists; the election's winner keeps it, the others close it before anyone connected.
void RendezvousLink::elect(bool taking_over) {
  const RendezvousConfig& r = config_.rdzv;
  auto server = std::make_unique<rdzv::Server>(io_, elected_job_, log_);
  server->start(r.local_addr.empty() ? rdzv::kEveryAddress : r.local_addr, 0, /*announce=*/false);
  server_ = std::move(server);
  // Where the others reach it: --local-addr, else this machine's name (the address the other nodes use for it).
  const std::string host = r.local_addr.empty() ? config_.host : r.local_addr;
  const nlohmann::json offer = {{"host", host}, {"port", server_->port()}, {"node", config_.host},
                                {"pid", static_cast<long>(::getpid())}};
  etcd::CoordinatorElection::Handlers h;
  h.on_won = [this, host, taking_over](const std::string& round) {
    take_round_back_from(round, taking_over);
    server_->fence_rounds(election_->token());
    server_->gate_rounds([this](std::function<void(bool)> answer) {
      election_->confirm_lease(kConfirmLeaseLimit, [this, answer](bool ok, const std::string& why) {
        if (!ok) boost::asio::post(io_, [this, why] { resign(why); });
        answer(ok);
      });
    });
    server_->announce();
    log_.info("this node hosts the rendezvous (elected in etcd at ", etcd::describe(election_->endpoints()),
              "): port ", server_->port(), taking_over ? "; the job's nodes come back to it" : "");
    server_host_ = host;
    host_offer_.clear();
    join_host(taking_over);
  };
  h.on_lost = [this, taking_over](const std::string& value) {
    server_->stop();
    server_.reset();
    // Whoever may write the job's keys wrote this: its depth is bounded before it is parsed, every field's type
    // checked (issue 55: a million-deep value crashed the agent, a "node": 5 made every agent exit 70).
    const auto held = json_nesting_within(value, 4) ? nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false)
                                                    : nlohmann::json();
    const auto field = [&held](const char* key) { return held.is_object() ? held.find(key) : held.end(); };
    const bool ours = held.is_object() && field("host") != held.end() && field("host")->is_string() &&
                      field("port") != held.end() && field("port")->is_number_integer() &&
                      field("port")->get<std::int64_t>() > 0 && field("port")->get<std::int64_t>() <= 65535 &&
                      (field("node") == held.end() || field("node")->is_string());
    if (!ours)
      return handlers_.on_error({rdzv::ErrorKind::kProtocol, "etcd: the job's coordinator key holds '" +
                                                                 value.substr(0, 200) +
                                                                 "', not a ddprun rendezvous address: is the key "
                                                                 "prefix shared with another program?"});
    host_offer_ = value;
    server_host_ = held["host"].get<std::string>();
    server_port_ = held["port"].get<int>();
    log_.info("the rendezvous is hosted by ", held.value("node", server_host_), " at ", server_host_, ":",
              server_port_, " (elected in etcd)");
    join_host(taking_over);
  };
  h.on_error = [this](const std::string& why, etcd::ElectionFailure kind) {
    if (kind == etcd::ElectionFailure::kReplaced) return boost::asio::post(io_, [this, why] { replaced(why); });
    handlers_.on_error({kind == etcd::ElectionFailure::kRefused     ? rdzv::ErrorKind::kRefused
                        : kind == etcd::ElectionFailure::kMalformed ? rdzv::ErrorKind::kProtocol
                                                                   : rdzv::ErrorKind::kUnavailable,
                        why});
  };
  h.on_ended = [this](const std::string& record) { on_recorded_end(record); };
  // Issue 53, invariant 2: a host that cannot renew its lease runs its round on only while every node hears it.
  h.on_lease_standing = [this](bool lapsing) {
    if (server_ && hosting()) server_->lease_standing(lapsing);
  };
  election_ = std::make_unique<etcd::CoordinatorElection>(io_, etcd::parse_endpoints(r.etcd.endpoints),
                                                          election_config(), std::move(h), log_);
  election_->run(offer.dump(), host_offer_);
}

// Issue 53, invariant 2: a host that cannot renew its etcd lease when a round must form (cut off with a minority
// of etcd's members) forms none, since another host may be elected once its lease runs out: before, both sides of
// a partition formed "restart 1" and trained at once. It stops hosting; its workers are down already (the round
// that needed a successor was stopped). Its nodes lose it and look for the job's host in etcd again.
void RendezvousLink::resign(const std::string& why) {
  if (!server_ || finishing_) return;
  const std::string text = "this node hosts the job's rendezvous but could not renew its etcd lease before forming "
                           "a new round (" + why + "): it forms none and leaves the job to the host etcd elects "
                           "(a partition with a minority of etcd's members?)";
  election_->cancel();
  if (client_) client_->close();
  server_->stop();
  server_.reset();
  handlers_.on_error({rdzv::ErrorKind::kLostServer, text});
}

// This host's lease ran out while etcd was out of its reach, and another agent won the key meanwhile (issue 53, the
// nemesis with default heartbeats, seed 1: the old host, re-forming, ended 69 naming itself while the job completed
// under its successor). It leaves the job as a resigning host does, and ends with what etcd records of the job's end
// (finish: learn_end), else 74: it cannot know the job's outcome.
void RendezvousLink::replaced(const std::string& why) {
  if (finishing_) return;
  if (client_) client_->close();
  if (server_) {
    server_->stop();
    server_.reset();
  }
  lost_host_ = true;
  handlers_.on_error({rdzv::ErrorKind::kLostServer, why + ": this node no longer hosts the job, and leaves it to that "
                                                      "host"});
}

// Dropped from an elastic job met in etcd: the host may have changed, or the job ended, while this node was away
// (issue 53, nemesis seeds 11, 12, 14: the node went back to the address it knew, or to the takeover it had begun,
// and waited --rdzv-timeout, 90 s, for a server that was gone, then named its own root cause). It asks etcd again,
// as at the start: the key's holder now (whom it joins), the job's recorded end (with which it ends), or a free key
// (it hosts, taking the kept round back). A host it then cannot reach within that host's lease is elected anew.
void RendezvousLink::rejoin_elected() {
  if (election_ && !election_->won()) election_->cancel();  // a takeover begun before the drop came
  if (server_ && !hosting()) {
    server_->stop();
    server_.reset();
  }
  retire_client();
  placed_ = false;
  rejoining_ = true;
  rejoin_expected_ = false;
  elected_since_ = std::chrono::steady_clock::now();
  host_offer_.clear();  // not a stale holder to wait out: whoever holds the key now is the host to join
  elect(/*taking_over=*/true);
}

// The job ended while this node was away or before it came (etcd holds its end): it never hosts the job again,
// and ends as every other node did, with the recorded root cause and its exit code (issue 53). A record it cannot
// read is etcd's problem to name (exit 76, the protocol's), never a fresh election.
void RendezvousLink::on_recorded_end(const std::string& record) {
  if (server_) {
    server_->stop();
    server_.reset();
  }
  if (client_) client_->close();  // a reconnecting client would end on its own, with another cause
  std::string problem;
  const auto end = rdzv::decode_recorded_end(record, config_.rdzv.job.run_id, problem);
  if (!end)
    return handlers_.on_error({rdzv::ErrorKind::kProtocol, "etcd: " + problem + "; key " +
                                                               etcd::end_key(election_config()) + ": '" +
                                                               record.substr(0, 200) + "'"});
  log_.warning("etcd records that this job has ended (", rdzv::describe(*end), "; recorded by ", end->host,
               "): this node ends with it (to run the job again, give it a new --rdzv-id: an ended one stays closed "
               "for ", election_config().end_ttl.count(), " s)");
  if (end->complete) return handlers_.on_job_complete(end->noticed);
  if (!end->root_cause)
    return handlers_.on_error({rdzv::ErrorKind::kTimeout, "the job ended before this node joined: " + end->reason});
  rdzv::StopOrder order;
  order.root_cause = *end->root_cause;
  order.reason = "recorded in etcd by " + end->host;
  handlers_.on_stop(order);
}

// Before the first round nothing of the job is lost with its host: the agents elect another (once the gone host's
// lease has run out) and gather there. After it, the host's node took its workers with it, and the loss is the
// job's, as any node's.
bool RendezvousLink::may_elect_again(const rdzv::ClientError& e) const {
  const bool gone = e.kind == rdzv::ErrorKind::kLostServer || e.kind == rdzv::ErrorKind::kTimeout;
  return gone && config_.rdzv.hosting == Hosting::kElected && !placed_ && !server_ && !host_offer_.empty() &&
         std::chrono::steady_clock::now() - elected_since_ < config_.rdzv.job.join_timeout;
}

// The round this node's server runs is kept in etcd at each round's start; a host taking over checks the nodes'
// claims against the one its predecessor kept (only the agent that held a place knows the secret behind its
// seat: rendezvous/auth.hpp), as a restarted ddprun-rendezvous checks its file.
void RendezvousLink::take_round_back_from(const std::string& kept, bool taking_over) {
  const std::string run_id = config_.rdzv.job.run_id;
  server_->keep_rounds([this, run_id](const rdzv::RememberedRound& round) {
    if (election_) election_->keep_round(rdzv::encode_remembered_round(run_id, round));
  });
  if (!taking_over) return;
  std::string problem;
  auto round = kept.empty() ? std::nullopt : rdzv::decode_remembered_round(kept, run_id, "the round kept in etcd",
                                                                             problem);
  if (round) return server_->remember(std::move(*round));
  log_.warning(problem.empty() ? "no round kept in etcd" : problem,
               ": the first claims define the round this server takes back");
}

// The host was not gone after all (a cut link healed, and this client is back with it): the election waiting for
// its lease to run out would wait in vain, and end the job when read_timeout passed.
void RendezvousLink::abandon_takeover() {
  if (!election_ || election_->won() || !server_) return;
  log_.info("back with the rendezvous host: no other is elected");
  election_->cancel();
  server_->stop();
  server_.reset();
}

// A first election starts the client; a takeover points the reconnecting one at the new host, where its hello
// claims this node's place in the round (rendezvous/client_reconnect.hpp).
void RendezvousLink::join_host(bool taking_over) {
  if (!taking_over || !client_ || client_retired_) return start_client();
  client_->retarget(server_host_, server_port());
}

rdzv::ClientHandlers RendezvousLink::client_handlers() {
  if (config_.rdzv.hosting != Hosting::kElected) {
    if (rejoin_after_loss_.empty()) return handlers_;
    rdzv::ClientHandlers h = handlers_;
    // Joining again after a fence (round_fence.hpp) and the server not found: the loss is the end, as before.
    h.on_error = [this](const rdzv::ClientError& e) {
      if (e.kind != rdzv::ErrorKind::kTimeout || placed_) return handlers_.on_error(e);
      handlers_.on_error({rdzv::ErrorKind::kLostServer, rejoin_after_loss_ + "; not found again: " + e.message});
    };
    h.on_assignment = [this](const rdzv::Assignment& a) {
      placed_ = true;
      handlers_.on_assignment(a);
    };
    return h;
  }
  rdzv::ClientHandlers h = handlers_;
  // The host lost while the job runs: this client reconnects (the workers keep running) while another host is
  // elected, once the lost one's lease ran out; it then goes to the new host, which takes the round back from the
  // nodes' claims and judges the nodes that do not come (the lost host's own, at least).
  h.on_reconnect = [this](bool back, const std::string& text) {
    if (handlers_.on_reconnect) handlers_.on_reconnect(back, text);
    if (back) return abandon_takeover();
    if (server_ || rejoin_expected_) return;
    log_.warning("the rendezvous host elected in etcd is lost while the job runs (", text,
                 "); electing another once its lease runs out, the workers keep running");
    // A job's end in the same turn (finish()) must not be followed by a new server and election: the loop would
    // never run out of work.
    boost::asio::post(io_, [this] {
      if (!finishing_) elect(/*taking_over=*/true);
    });
  };
  // Issue 53, invariant 1: a round formed by a host elected before one this node has seen is never started (that
  // host was replaced: its lease ran out while it was cut off, and it formed a round anyway).
  h.on_assignment = [this](const rdzv::Assignment& a) {
    if (a.fence < highest_fence_)
      return handlers_.on_error({rdzv::ErrorKind::kProtocol,
                                 "round " + std::to_string(a.restart_count) + " comes from a rendezvous host elected "
                                 "in etcd before the one this node has seen (fencing token " + std::to_string(a.fence) +
                                 " < " + std::to_string(highest_fence_) + "): not started, two hosts of one job"});
    highest_fence_ = a.fence;
    placed_ = true;
    handlers_.on_assignment(a);
  };
  h.on_error = [this](const rdzv::ClientError& e) {
    if (!may_elect_again(e)) {
      lost_host_ = !hosting() && (e.kind == rdzv::ErrorKind::kLostServer || e.kind == rdzv::ErrorKind::kTimeout);
      return handlers_.on_error(e);
    }
    log_.warning("the rendezvous host elected in etcd is gone before the job formed (", e.message,
                 "); electing another once its lease runs out");
    // Not from inside the client's own handler: it is released on the next turn of the loop.
    boost::asio::post(io_, [this] {
      if (finishing_) return;
      retire_client();
      elect(/*taking_over=*/rejoining_);
    });
  };
  return h;
}

}  // namespace ddprun::agent
