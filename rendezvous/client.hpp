// The rendezvous client: one per agent. Connects (retrying until the server is up), proves the job token
// (and its uid with a MUNGE credential when the server asks), joins, heartbeats, and turns server messages into handler calls.
//
// Runs on the caller's io_context, single-threaded, no threads of its own. Handlers are called on that
// loop; they may call any method, including close(), and may destroy the Client. After a terminal call
// (on_job_complete, a final on_stop, or on_error) no handler is called again and the connection is closed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/log.hpp"
#include "rendezvous/errors.hpp"
#include "rendezvous/failure.hpp"
#include "rendezvous/framing.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

struct JoinRequest {
  std::optional<int> node_rank;  // static node ranks only (--node-rank, SLURM_NODEID)
  int nproc = 1;                 // this node's worker count
  std::string host;              // hostname, for messages; empty = gethostname()
  std::string address;           // how the other nodes reach this one (--local-addr); empty = as the server sees it
  // MASTER_PORT candidate, used if this node becomes node 0: --master-port, or 0 to have the client pick a
  // free port on this machine just before joining (only when this node can become node 0).
  int master_port = 0;
  // --master-port given: offer the same port every round. Otherwise a fresh one is picked for each restart
  // round (report_stopped), as torchrun --standalone does: the last round's may have been taken since.
  bool master_port_fixed = false;
  // This node's agent hosts the server in-process: its own departure (a signal) ends the job, which cannot
  // go on without the server, instead of re-forming an elastic job around it.
  bool hosts_server = false;
  // Set: this node ran that round and its workers are down (it joins again after stopping them for its server's
  // silence, agent/round_fence.hpp). The server numbers a round it gathers after it, and a server whose job has
  // ended tells such a node how, instead of refusing it as a stranger to a closed rendezvous.
  std::optional<int> after_round;
};

struct ClientConfig {
  std::string server_host;  // name or address of the rendezvous server
  std::uint16_t server_port = 0;
  // More ports to try, in this order after server_port, when the server is not found there: a SLURM step's
  // candidates (launcher/slurm_ports.hpp), for the server, node 0, binds the first free one. A port where
  // nothing listens, where no challenge comes within a second, or whose challenge lacks this job's server
  // proof (another step's server) passes to the next; around the cycle with the usual back-off.
  std::vector<std::uint16_t> more_ports;
  std::string run_id;
  std::string token;
  // munged's socket for the MUNGE credential a server may ask for in its challenge ("" = libmunge's default).
  // The server decides whether one is needed (JobConfig::require_munge); the client follows.
  std::string munge_socket;
  JoinRequest join;
  // Non-empty: this node cannot take part (why). The client connects only to say so (hello.cannot_join), so
  // that a job of fixed size ends at once instead of waiting for it, then ends with kUnavailable and `why`.
  std::string cannot_join;
  // Keep retrying the connection this long: node 0 may start its in-process server after the others.
  std::chrono::milliseconds connect_timeout{900'000};
  std::string connect_timeout_option = "--rdzv-timeout";  // what set connect_timeout, for the messages
  // A resumable server (ddprun-rendezvous, ChallengeMsg::resumable) lost while this node runs a round: keep
  // reconnecting this long, then claim the round (client_reconnect.hpp). 0: the loss ends the client at once.
  std::chrono::milliseconds reconnect_timeout{0};
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Non-empty: connect from this local address (bound before connecting; the port is the kernel's). Only the
  // load generator sets it, to spread many simulated agents over 127.0.0.0/8. Throws ConnectionError if invalid.
  std::string source_address;
  // The agent's seat secret (auth.hpp seat_commitment), kept by the agent across its clients so that a node joining
  // again after its fence is known as the one that held its old place. "": a fresh one for this client.
  std::string seat_secret;
};

struct StopOrder {
  Failure root_cause;   // the same on every node
  std::string reason;
  bool restarting = false;  // restart round: stop the workers, call report_stopped(), await on_assignment
  bool membership = false;  // the round re-forms because nodes joined: nothing failed (reason says who)
  bool rejoin = false;      // this node was dropped and the job goes on: it may join again as a new node
};

struct ClientHandlers {
  std::function<void(const Assignment&)> on_assignment;  // once per round
  std::function<void(const StopOrder&)> on_stop;         // every node, the reporter included
  // Every worker on every node exited 0; `noticed`: after a scheduler's notice reached some node's running
  // workers (the job's word: this node ends as preempted under SLURM whether or not the notice reached it).
  std::function<void(bool noticed)> on_job_complete;
  std::function<void(const ClientError&)> on_error;      // refused, timed out, lost the server, protocol
  std::function<void()> on_capture;  // a hang elsewhere: capture every worker's stacks, then report_hang_view
  std::function<void(const JobViewMsg&)> on_job_view;  // the answer to request_view
  std::function<void(const StragglersMsg&)> on_stragglers;  // the ranks named stragglers changed
  // ClientConfig::reconnect_timeout: the server was lost and the client reconnects (back == false, `text` why),
  // or a restarted server took this node back (back == true). Neither is terminal.
  std::function<void(bool back, const std::string& text)> on_reconnect;
  std::function<void(const HangDeferredMsg&)> on_hang_deferred;  // a declared quiet phase: nobody is hung yet
  // The server answered a heartbeat, this long after it was sent (the load generator's steady-state figure).
  std::function<void(std::chrono::microseconds rtt)> on_heartbeat_ack;
  // Every node of round `round` said report_round_ready: workers kept in place take the round up now.
  std::function<void(int round)> on_meet;
};

class Client {
 public:
  Client(boost::asio::io_context& io, ClientConfig config, ClientHandlers handlers, Logger logger);
  ~Client();  // close()
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Asynchronous: resolve, connect (with retries), authenticate, join. Throws ConnectionError only if it
  // must pick a master port (join.master_port == 0) and cannot.
  void start();
  // Queued until the hello is sent; then written in order. Ignored after a terminal event.
  void report_failure(const Failure& failure);
  void report_node_done(bool noticed = false);  // every local worker exited 0 (noticed: a notice reached them)
  void report_stopped();     // restart round: every local worker is down (with a fresh master port offer)
  void report_hang_view(const HangViewMsg& view);  // --hang-timeout: this node's workers, judged
  // This node's workers can meet in round `round` (on_meet when all can). False, and nothing sent, when the
  // server does not take it (an older ddprun-rendezvous): no meet will come.
  bool report_round_ready(int round);
  // The live view: this node's latest (agent/live_status.hpp), and its running ranks' paces for straggler naming.
  void report_status(std::string status_json, std::vector<RankPace> paces);
  void request_view();                             // every node's latest status: on_job_view
  void close();              // no more handlers; idempotent
  // The server was lost and the client is reconnecting (ClientConfig::reconnect_timeout): nobody answers now.
  bool reconnecting() const;
  // While reconnecting: the server was lost to its silence (nothing heard for the heartbeat timeout), not to a
  // closed or reset connection. A silent server may be alive behind a cut, and may go on without this node.
  bool lost_silently() const;
  bool server_resumable() const;  // the server's challenge said it may be restarted (ChallengeMsg::resumable)
  std::optional<int> last_round() const;  // the last round an assignment placed this node in
  // While reconnecting: this node stops its workers of the round it ran (agent/round_fence.hpp), so it no longer
  // claims that round; once report_stopped says they are down it comes back between rounds (after_round).
  void leave_round();
  // Where the server is now, while reconnecting (a host elected anew in etcd, agent/rendezvous_link_elected.cpp):
  // the next attempt, at once, goes there, and every later one. Outside a reconnection it only changes where a
  // later one would go.
  void retarget(const std::string& host, std::uint16_t port);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// A free TCP port on this machine for MASTER_PORT (process::pick_master_port: outside the kernel's
// ephemeral range, so no port the kernel hands out can take it before the TCPStore binds). Throws
// ConnectionError.
std::uint16_t pick_free_port(const std::string& bind_address = "0.0.0.0");

// The block an agent logs once the rendezvous completes.
std::string format_summary(const Assignment& assignment, const std::string& host);

}  // namespace ddprun::rendezvous
