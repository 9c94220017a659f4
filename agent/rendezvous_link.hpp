// This node's tie to the job: the rendezvous client, and the server too when this node hosts it (standalone,
// single node, static node 0, the dynamic endpoint's own machine, or the winner of the job's election in etcd).
// All share the agent's Asio loop.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "agent/agent_config.hpp"
#include "common/exit_codes.hpp"
#include "etcd/coordinator_election.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/recorded_end.hpp"
#include "rendezvous/server.hpp"

namespace ddprun::agent {

// ddprun's exit code for a rendezvous outcome (common/exit_codes.hpp: kExitRdzv*).
int exit_code_of(const rendezvous::ClientError& error);

// What etcd says of the job's end where it is not this node's own word (RendezvousLink::finish, a host elected
// in etcd): both empty when there is nothing to change.
struct EndInEtcd {
  std::optional<rendezvous::RecordedEnd> recorded;  // the end the host that replaced this one recorded: the job's
  std::string unconfirmed;  // this node's verdict could be neither recorded nor checked: why (exit 74)
};

class RendezvousLink {
 public:
  RendezvousLink(boost::asio::io_context& io, const AgentConfig& config, rendezvous::ClientHandlers handlers);
  ~RendezvousLink();

  // Hosts the server when asked, then starts the client. Throws rendezvous::ConnectionError when the
  // server must be hosted here and cannot listen, MungeError when it must require MUNGE and munged is silent.
  void start();
  // start() threw `why` on a node whose job has other nodes: tells them, so that they end now with this
  // reason instead of waiting --rdzv-timeout (state_machine_start.cpp). Node 0 serves the reason on its
  // port until every node heard it (at most 10 s); another node says it to node 0's server. Then `done`.
  // False when there is no one to tell (one node) or no way to (node 0 cannot listen either).
  bool announce_start_failure(const std::string& why, std::function<void()> done);
  rendezvous::Client& client() { return *client_; }
  // This node was dropped from an elastic job that goes on (StopOrder::rejoin) and its workers are gone: a
  // fresh client joins the job again as a new node (a plain hello, no claim of the old round). Never called
  // on the node hosting the server (the job cannot re-form without that one).
  void rejoin();
  void rejoin_elected();  // rendezvous_link_elected.cpp
  // The agent stops its workers for a silent server (agent/round_fence.hpp) and will rejoin() once they are down:
  // no takeover election begins meanwhile for the host's loss.
  void expect_rejoin(const std::string& lost_why);
  // This node hosts the job's rendezvous: its own server, or (etcd) the one it won the election with. A candidate
  // still waiting for an election (a takeover) does not: it is a node like the others (issue 53: a node dropped
  // from an elastic job did not join it again while its takeover candidate listened, and ended naming itself).
  bool hosting() const { return server_ != nullptr && (!election_ || election_->won()); }
  std::uint16_t server_port() const;

  // Closes the client; a hosted server stays until the other nodes have read their last message (at most
  // 2 s), so that this node's exit never turns into "lost the server" elsewhere. A host elected in etcd then
  // records the job's end there (a verdict on a lost node waits up to read_timeout for etcd). Then `done`.
  void finish(std::function<void(const EndInEtcd&)> done);
  // A stop signal while finish() waits (up to 10 s when the job could not start, to tell late nodes): stop
  // waiting, `done` now (issue 34: node 0 ignored SIGTERM for that long; a scancel took 6.6 s). False when
  // nothing waits.
  bool cut_finish_short();

 private:
  bool wants_munge(const RendezvousConfig& r);
  // Listens on the first of the candidate ports that is free; throws ConnectionError naming them all.
  void listen_on_a_candidate(rendezvous::Server& server, const std::string& bind_address);
  rendezvous::ClientConfig client_config() const;
  // --rdzv-backend etcd (rendezvous_link_elected.cpp): listens on a free port, then asks etcd who hosts; a loser
  // stops listening and joins the winner. An etcd that never answers is the client's kUnavailable error (exit 69).
  void start_elected(rendezvous::JobConfig job);
  void elect(bool taking_over);       // taking_over: the host was lost after the job formed
  etcd::ElectionConfig election_config() const;
  void on_recorded_end(const std::string& record);  // etcd holds the job's end: this node ends with it
  void resign(const std::string& why);  // a host that could not renew its lease before a round: it forms none
  void replaced(const std::string& why);  // a host whose lease ran out and whose key another agent won
  static bool verdict_needs_etcd(const rendezvous::RendezvousState& state);
  EndInEtcd end_in_etcd(const etcd::CoordinatorElection::EndOutcome& o, bool needs_etcd) const;
  void join_host(bool taking_over);
  void take_round_back_from(const std::string& kept, bool taking_over);
  void abandon_takeover();
  bool may_elect_again(const rendezvous::ClientError& e) const;
  // handlers_, but with etcd: a host gone before the first round means another election, not the end.
  rendezvous::ClientHandlers client_handlers();
  void start_client();

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  rendezvous::ClientHandlers handlers_;
  Logger log_;
  std::unique_ptr<rendezvous::Server> server_;
  std::unique_ptr<rendezvous::Client> client_;
  std::unique_ptr<etcd::CoordinatorElection> election_;
  bool finishing_ = false;  // finish() came: an election posted before it does not begin
  rendezvous::JobConfig elected_job_;                       // what a server elected here is started with
  std::chrono::steady_clock::time_point elected_since_{};  // re-elections stop after --rdzv-timeout from here
  std::string host_offer_;  // what the elected host offered in etcd (this node joined it), for a re-election
  bool placed_ = false;     // an assignment came: the job formed
  std::int64_t highest_fence_ = 0;  // the highest fencing token of a round this node was assigned (etcd)
  bool rejoining_ = false;  // dropped and joining again (rejoin): a host it elects takes the job's round back
  bool rejoin_expected_ = false;  // expect_rejoin(): rejoin() comes once the workers are down
  // expect_rejoin()'s: the loss that made this node join again, and how long it looks for the server then (node 0's
  // own server: the heartbeat timeout it lingers to tell a silent node the verdict; one that may be restarted:
  // --rdzv-reconnect-timeout). Not found within it: the loss is the end (74), as before the fence.
  std::string rejoin_after_loss_;
  std::chrono::milliseconds rejoin_window_{0};
  std::optional<int> rejoin_after_round_;  // the round whose workers the fence stopped (JoinRequest::after_round)
  // The client is closed and the next host gets a fresh one (join_host): it stays, closed, until then, since the
  // agent's reports (the live view's status every few seconds) go to client() meanwhile and are dropped there.
  bool client_retired_ = false;
  void retire_client() {
    if (client_) client_->close();
    client_retired_ = true;
  }
  bool lost_host_ = false;  // the client ended for the host's loss (not hosting): finish() reads etcd's end
  // This agent's seat secret, the same for every client it makes: a node that joins again after its fence takes its
  // own stale place out of the round (state_machine.cpp replace_silent_self), which no other token holder can.
  const std::string seat_secret_ = rendezvous::random_hex(32);
  std::string server_host_;  // where the client connects: the configured endpoint, or the elected coordinator
  int server_port_ = 0;
  std::function<void()> finish_done_;  // finish()'s `done` while the server drains
};

}  // namespace ddprun::agent
