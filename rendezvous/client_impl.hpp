// Internal to the rendezvous library: the client's state, shared by client.cpp (the conversation: hello,
// messages, writes) and client_connect.cpp (connecting, retrying, reconnecting, heartbeats).
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <optional>

#include "common/error.hpp"
#include "common/timeouts.hpp"
#include "rendezvous/address_race.hpp"
#include "rendezvous/auth.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/client_reconnect.hpp"
#include "rendezvous/frame_seal.hpp"
#include "rendezvous/framing.hpp"
#include "rendezvous/name_lookup.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::rendezvous {

namespace client_limits {
// Until the challenge names the server's heartbeat settings.
inline constexpr std::chrono::milliseconds kHandshakeInterval{500};
inline constexpr std::chrono::milliseconds kHandshakeTimeout{10'000};
// Nodes usually start together, and node 0 may open its server a few ms after the others connect (longer with
// MUNGE: it first checks that munged answers). A refused connect costs a SYN and a RST; retrying after 2, 4, 8 ...
// ms (was 20, 40 ...) saved ~18 ms of a 2-node job's start whenever node 1 came first (BENCHMARKS "MUNGE").
inline constexpr std::chrono::milliseconds kFirstRetry{2};
inline constexpr std::chrono::milliseconds kMaxRetry{1000};
// Back to a restarted server (client_reconnect.hpp): nothing waits on it while the workers train, but whatever
// happens meanwhile (a failure to announce) waits until it is found, so it is looked for 4 times a second (a
// refused connect costs a SYN and a RST): the restart -> resumed median went from 357 ms (the 1 s cap) to ~130 ms.
inline constexpr std::chrono::milliseconds kMaxReconnectRetry{250};
// Candidate ports (a SLURM step): node 0 binds the first free one whenever it starts, so every port is visited
// at least this often for as long as the node waits. The back-off is between rotations; within one, a refused
// port moves on to the next at once. With one port per back-off step (1 s each, as before 2026-12) a joiner came
// back to node 0's port only ~8 s later, after node 0's 5 s --join-grace had ended the step (issue 54: node 0
// 1.5 s late, 0 of 6 steps started; job arrays 7 of 24).
inline constexpr std::chrono::milliseconds kMaxCandidateRotation{200};
// One connect attempt (or name look-up) may take this long, and never past the connect deadline: a server
// whose SYNs vanish (a firewall, a full accept queue) would otherwise hold a connect() for ~2 minutes.
// Each attempt that runs out doubles the next one's limit, up to kMaxAttemptLimit: a path whose round trip is
// longer than the first limit (2.5 s each way to the rendezvous host: a connect takes 5 s) is still reached.
inline constexpr std::chrono::milliseconds kAttemptLimit = timeouts::kConnectAttempt;
inline constexpr std::chrono::milliseconds kMaxAttemptLimit{24'000};
// With candidate ports (a SLURM step), a port whose listener sends no challenge this soon is not our server
// (an unrelated program holds it): the next candidate is tried.
inline constexpr std::chrono::milliseconds kCandidateChallengeLimit{1000};
// A node that cannot take part tries this long to say so; the others started with it (a SLURM step), and one
// that cannot be reached in this time is failing too.
inline constexpr std::chrono::milliseconds kCannotJoinTellLimit{30'000};
// Nodes usually find the server within milliseconds; one still looking after this says where it looks and what
// each address answered (a refused IPv6 address beside a silent IPv4 one reads differently from "nothing").
inline constexpr std::chrono::milliseconds kSayTryingAfter{3000};
}  // namespace client_limits

// Shorthands for the two files that define the client (this header is theirs alone).
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using std::chrono::milliseconds;
using namespace client_limits;

class Client::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ClientConfig config, ClientHandlers handlers, Logger logger)
      : config_(std::move(config)), handlers_(std::move(handlers)), logger_(logger.for_part("rendezvous")),
        lookup_(io), race_(io), socket_(io), retry_timer_(io), attempt_timer_(io), heartbeat_timer_(io),
        decoder_(config_.max_frame_bytes + kSealTagBytes), reconnect_(config_.reconnect_timeout) {
    ports_.push_back(config_.server_port);
    ports_.insert(ports_.end(), config_.more_ports.begin(), config_.more_ports.end());
    cannot_join_ = config_.cannot_join;
    if (!config_.source_address.empty()) {
      error_code ec;
      const auto source = asio::ip::make_address(config_.source_address, ec);
      if (ec) throw ConnectionError("invalid source address \"" + config_.source_address + "\": " + ec.message());
      race_.set_source(source);
    }
  }
  void start();
  void report_stopped();
  void send(const ClientMessage& message);
  void close();
  bool reconnecting() const { return reconnect_.active() && !done_; }
  bool lost_silently() const { return reconnecting() && lost_silent_; }
  bool server_resumable() const { return reconnect_.server_resumable(); }
  std::optional<int> last_round() const { return reconnect_.last_round(); }
  void leave_round() {
    if (reconnecting()) reconnect_.on_restart_ordered();
  }
  bool server_meets() const { return server_meets_; }
  void retarget(const std::string& host, std::uint16_t port);

 private:
  using Clock = std::chrono::steady_clock;

  std::uint16_t port() const { return ports_[port_index_]; }
  std::string where() const { return text::host_port(config_.server_host, port()); }
  bool candidates() const { return ports_.size() > 1; }

  // Candidate ports: the server was not found at this one; the next attempt tries the next.
  void next_port();

  // Drops a connection that has not been challenged (or whose challenge was not our server's) and tries again.
  void abandon_connection(const std::string& why);
  // Closes the socket; whatever is still pending on it (read, write, timer) is stale from now on (attempt_).
  void drop_connection();

  // The server is gone (closed, reset, silent). A resumable one is reconnected to while this node's workers
  // keep running (client_reconnect.hpp); otherwise, or once reconnect_timeout passed, the client ends.
  void lost(const std::string& why, bool silent = false);  // silent: nothing heard, not closed (client_reconnect.hpp)
  void connect();

  // The attempt's own deadline: past it, the look-up's late answer is ignored and the connect is cancelled.
  void arm_attempt_limit(unsigned attempt);

  // A name that does not resolve is worth saying at once, at the default level: it is usually a typo or
  // a node list ddprun misread, and the rest of --rdzv-timeout would otherwise pass in silence.
  void say_unresolved(const std::string& why);
  // Every address of the name, raced (address_race.hpp); the winner becomes this connection.
  void connect_to(std::vector<tcp::endpoint> endpoints, unsigned attempt);
  // Once the server has not been reached for kSayTryingAfter: which addresses are tried and what each answered.
  void say_trying();

  // The server may not be up yet (node 0 starts it), or is being restarted (reconnect_): retry with backoff until
  // connect_timeout, or the reconnect deadline.
  // rotate: with candidate ports, the next attempt tries the next one (the server was not found at this one).
  void retry(const std::string& why, bool rotate = false);
  void read_some();
  void handle(ServerMessage message);
  void on_challenge(const ChallengeMsg& challenge);
  void on_proof(const ProofMsg& proof);
  void send_hello(const ChallengeMsg& challenge);  // the server proved this connection: who we are
  // The program at the endpoint did not prove it knows the token, or `said` what no server of ours would (another
  // protocol, garbage): it is passed by, and the search goes on until the deadline.
  void distrust(const std::string& said = {});
  void write_next();

  // One timer: sends heartbeats and notices a silent server.
  void schedule_heartbeat();
  void fail(ErrorKind kind, const std::string& message);
  void report(const ClientError& error);
  std::string port_list() const;
  static std::string local_hostname();

  ClientConfig config_;
  ClientHandlers handlers_;
  Logger logger_;
  NameLookup lookup_;
  AddressRace race_;
  tcp::socket socket_;
  asio::steady_timer retry_timer_;
  asio::steady_timer attempt_timer_;
  asio::steady_timer heartbeat_timer_;
  FrameDecoder decoder_;
  Reconnect reconnect_;  // a resumable server lost while this node runs a round (client_reconnect.hpp)
  // This agent's seat (auth.hpp): its commitment goes in every hello, the secret only in a resume claim, so that
  // no other token holder can take this node's place back while it is away (issue 33).
  const std::string seat_secret_ = config_.seat_secret.empty() ? random_hex(32) : config_.seat_secret;
  const std::string seat_ = seat_commitment(seat_secret_);
  std::array<char, 1024> read_buffer_{};
  std::deque<std::string> outbox_;
  std::deque<Clock::time_point> heartbeats_sent_;  // unanswered, in order: the server answers each in turn
  void note_heartbeat_sent();
  std::vector<std::string> pending_;  // reports made before the hello went out
  Clock::time_point connect_deadline_;
  milliseconds connect_limit_{0};
  Clock::time_point connected_at_;
  std::vector<std::uint16_t> ports_;  // server_port, then more_ports
  std::size_t port_index_ = 0;
  std::string name_problem_;  // the name look-up's last failure, for the final message
  bool resolved_ = false;     // the name gave addresses at least once (a literal address counts)
  std::string cannot_join_;   // this node cannot take part: why (ClientConfig::cannot_join, or no MUNGE here)
  bool leaving_ = false;      // the hello saying cannot_join is out: the connection's end is ours
  bool lost_silent_ = false;  // the reconnection under way began with the server's silence (Client::lost_silently)
  Clock::time_point last_heard_;
  milliseconds attempt_limit_ = kAttemptLimit;  // grows while attempts run out (kMaxAttemptLimit)
  milliseconds retry_delay_ = kFirstRetry;
  milliseconds heartbeat_interval_ = kHandshakeInterval;
  milliseconds heartbeat_timeout_ = kHandshakeTimeout;
  bool connected_ = false;
  bool challenged_ = false;  // the server spoke: from now on a closed connection is a lost server
  unsigned attempt_ = 0;  // numbers connect attempts, so a late answer to an abandoned one is ignored
  bool said_unresolved_ = false;
  bool said_trying_ = false;
  Clock::time_point trying_since_;  // when this (re)connect began, for say_trying
  bool said_unproven_ = false;  // the warning about a server without the proof, once
  std::string unproven_;        // the last such server, for the final message
  bool hello_sent_ = false;
  bool server_meets_ = false;  // the server takes round_ready (ChallengeMsg::meets)
  std::optional<ChallengeMsg> awaiting_proof_;  // the challenge whose connection proof (ProofMsg) is awaited
  std::string prove_nonce_;                     // our nonce in it (ProveMsg)
  // This connection's seals (frame_seal.hpp), from the hello on: every frame out is tagged, every frame in must open.
  std::unique_ptr<FrameSeal> seal_in_;
  std::unique_ptr<FrameSeal> seal_out_;
  bool opened_any_ = false;  // a sealed frame came: from now on a frame that does not open is an attack
  void push_out(std::string frame);  // to the outbox, sealed once the hello is (in order: the sequence's order)
  // A frame that came: opened, when the connection is sealed. Throws ProtocolError for one whose tag fails (bar a
  // refusal in the clear before any sealed frame: a server that could not open our hello cannot seal its answer).
  void open_in(std::string& payload);
  bool writing_ = false;
  bool done_ = false;
};

}  // namespace ddprun::rendezvous
