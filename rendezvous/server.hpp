// The rendezvous server: an Asio acceptor whose connections feed the state machine (state_machine.hpp).
//
// It only translates: frames → Events, Actions → frames. Runs on the caller's io_context, single-threaded,
// no threads of its own; the launcher's agent shares the loop. One periodic timer drives the clock (Tick
// events) for heartbeat deadlines, the join timeout and the elastic last call: no per-connection timers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "common/log.hpp"
#include "rendezvous/job_config.hpp"
#include "rendezvous/state_machine.hpp"

namespace ddprun::rendezvous {

class Server {
 public:
  // Throws RendezvousError if the config is invalid (validate()).
  Server(boost::asio::io_context& io, JobConfig config, Logger logger);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Listens on bind_address ("127.0.0.1", "0.0.0.0", "::", a host name) and port (0 = a free one), and
  // starts the join timeout. Throws ConnectionError naming the address if it cannot listen. Logs where it listens
  // (and a warning when it accepts any node that knows the run id) unless `announce` is false: a candidate of an
  // election in etcd, which says it with announce() once it won.
  void start(const std::string& bind_address, std::uint16_t port, bool announce = true);
  void announce();
  // The round this server takes back from its nodes' claims (JobConfig::remembered), learned after start: a host
  // elected in etcd reads it in the transaction that elects it. Before any node is admitted.
  void remember(RememberedRound round);
  std::uint16_t port() const;

  // This server's own node cannot take part (state_machine_start.cpp): the job ends before its first round,
  // and every node that comes is told `failure` (kUnavailable). async_wait_drained then waits for all of them.
  void cannot_start(Failure failure);

  // Closes the listener and every connection now. Idempotent; pending handlers finish as aborted.
  void stop();

  // Calls `done` (once, on the loop) when the job has ended (complete or stopped) and every agent has hung
  // up, or after max_wait, whichever is first: so a node that hosts the server does not exit before the
  // other nodes have read their last message. After a start failure, also every expected node was told.
  void async_wait_drained(std::chrono::milliseconds max_wait, std::function<void()> done);

  // Calls `done` (once, on the loop) when the job ends: complete, stopped, or rendezvous timed out.
  void async_wait_job_end(std::function<void()> done);

  // A resumable server's round started or was taken back: `keep` is given what its restart must find
  // (ddprun-rendezvous writes it to its file: remembered_round.hpp). Called on the loop.
  void keep_rounds(std::function<void(const RememberedRound&)> keep);

  // No round is handed out before `confirm` says so (a host elected in etcd: its lease renewed, with quorum, since
  // the last round; issue 53). Each round's assignments, and every action after them, wait in order until
  // `confirm`'s answer: true, and they go out; false, and they never do (the caller resigns: stop()).
  using RoundGate = std::function<void(std::function<void(bool ok)> answer)>;
  void gate_rounds(RoundGate confirm);
  // Every round this server hands out from now on carries `token` (Assignment::fence): the etcd revision that
  // created the coordinator key its host won.
  void fence_rounds(std::int64_t token);
  // The host's etcd lease lapsing (true) or renewed again (false): the state machine's LeaseStanding.
  void lease_standing(bool lapsing);

  // For tests, logs and benchmarks.
  Phase phase() const;
  const RendezvousState& state() const;
  std::size_t connection_count() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddprun::rendezvous
