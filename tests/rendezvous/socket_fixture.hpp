// Helpers for socket-level tests: a bounded event loop, recorded client events, and a raw peer that
// speaks (or abuses) the wire protocol by hand. Everything on 127.0.0.1; every wait has a deadline.
#pragma once

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <functional>
#include <memory>

#include "rendezvous/auth.hpp"
#include "rendezvous/frame_seal.hpp"
#include "rendezvous/client.hpp"
#include "rendezvous/server.hpp"

namespace ddprun::rendezvous::testing {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using asio::ip::tcp;

inline Logger quiet_logger() {
  return Logger(std::getenv("RDZV_TEST_VERBOSE") ? LogLevel::kDebug : LogLevel::kOff, "test", "");
}

// Runs the loop until `done()` or the timeout; returns done().
inline bool run_until(asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds timeout = 5000ms) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    if (io.stopped()) io.restart();
    io.run_one_for(5ms);
  }
  return done();
}

// Runs the loop for a while, for "nothing happens" checks.
inline void run_for(asio::io_context& io, std::chrono::milliseconds duration) {
  run_until(io, [] { return false; }, duration);
}

inline JobConfig test_job(int nnodes, bool static_ranks) {
  JobConfig config;
  config.run_id = "job42";
  config.token = "s3cret";
  config.min_nodes = config.max_nodes = nnodes;
  config.static_node_ranks = static_ranks;
  config.heartbeat_interval = 50ms;
  config.heartbeat_timeout = 400ms;
  config.join_timeout = 10s;
  return config;
}

// One agent's view: everything its handlers were told.
struct Recorder {
  std::vector<Assignment> assignments;
  std::vector<StopOrder> stops;
  bool complete = false;
  bool completed_noticed = false;  // the completion said a notice reached some node first
  int captures = 0;
  std::vector<JobViewMsg> views;
  std::vector<StragglersMsg> stragglers;
  std::vector<HangDeferredMsg> deferrals;
  std::vector<int> meets;  // on_meet: the rounds every node said it can meet in
  std::vector<bool> reconnects;  // on_reconnect: false when the server was lost, true when taken back
  std::optional<ClientError> error;

  ClientHandlers handlers() {
    return ClientHandlers{[this](const Assignment& a) { assignments.push_back(a); },
                          [this](const StopOrder& s) { stops.push_back(s); }, [this](bool noticed) { complete = true; completed_noticed = noticed; },
                          [this](const ClientError& e) { error = e; }, [this] { ++captures; },
                          [this](const JobViewMsg& v) { views.push_back(v); },
                          [this](const StragglersMsg& m) { stragglers.push_back(m); },
                          [this](bool back, const std::string&) { reconnects.push_back(back); },
                          [this](const HangDeferredMsg& m) { deferrals.push_back(m); }, {},
                          [this](int round) { meets.push_back(round); }};
  }
};

struct Agent {
  Recorder events;
  std::unique_ptr<Client> client;
};

inline ClientConfig client_config(std::uint16_t port, std::optional<int> node_rank, int nproc,
                                  const std::string& host = "testhost") {
  ClientConfig config;
  config.server_host = "127.0.0.1";
  config.server_port = port;
  config.run_id = "job42";
  config.token = "s3cret";
  config.join.node_rank = node_rank;
  config.join.nproc = nproc;
  config.join.host = host;
  config.connect_timeout = 3s;
  return config;
}

inline std::unique_ptr<Agent> start_agent(asio::io_context& io, ClientConfig config) {
  auto agent = std::make_unique<Agent>();
  agent->client = std::make_unique<Client>(io, std::move(config), agent->events.handlers(), quiet_logger());
  agent->client->start();
  return agent;
}

// A hand-driven peer: connects, writes raw bytes, reads frames.
class RawPeer {
 public:
  // receive_buffer > 0: a small SO_RCVBUF, so that a peer that does not read stalls the sender early.
  RawPeer(asio::io_context& io, std::uint16_t port, int receive_buffer = 0) : io_(io), socket_(io) {
    socket_.open(tcp::v4());
    if (receive_buffer > 0) socket_.set_option(asio::socket_base::receive_buffer_size(receive_buffer));
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  void send_bytes(const std::string& bytes) { asio::write(socket_, asio::buffer(bytes)); }
  // Writes while running the loop (the server shares it), for peers that write more than a socket buffer.
  // False when the write failed (the server closed us) or did not finish within a second.
  bool send_async(const std::string& bytes, asio::io_context& io) {
    bool finished = false, ok = false;
    asio::async_write(socket_, asio::buffer(bytes), [&](boost::system::error_code ec, std::size_t) {
      finished = true;
      ok = !ec;
    });
    if (!run_until(io, [&] { return finished; }, 1000ms)) {
      socket_.cancel();
      run_until(io, [&] { return finished; }, 1000ms);
      return false;
    }
    return ok;
  }
  // Sealed once the handshake sealed the connection (frame_seal.hpp), as an agent's frames are.
  void send(const ClientMessage& message) { send_bytes(frame(message)); }
  // The bytes send() would write (sealed, advancing the sequence, once the connection is): for bursts.
  std::string frame(const ClientMessage& message) {
    const std::string plain = encode_frame(encode(message));
    return seal_out_ ? seal_frame(*seal_out_, plain) : plain;
  }

  // The next frame's payload, or nullopt at end of stream / timeout.
  std::optional<std::string> read_frame(std::chrono::milliseconds timeout = 3000ms) {
    bool finished = false;
    while (!(frame_ = decoder_.next())) {
      if (eof_) return std::nullopt;
      finished = false;
      socket_.async_read_some(asio::buffer(buffer_), [this, &finished](boost::system::error_code ec, std::size_t n) {
        finished = true;
        if (ec) eof_ = true;
        else decoder_.feed(std::string_view(buffer_.data(), n));
      });
      if (!run_until(io_, [&] { return finished; }, timeout)) {
        socket_.cancel();
        run_until(io_, [&] { return finished; }, 1000ms);
        return std::nullopt;
      }
    }
    // A sealed connection's frames are opened; one that does not open is handed out as it came (a refusal in the
    // clear, or what a test means to see).
    if (frame_ && seal_in_) seal_in_->open(*frame_);
    return frame_;
  }

  // Reads (discarding frames) until the server hangs up; false if it did not within the timeout.
  bool wait_closed(std::chrono::milliseconds timeout = 3000ms) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!read_frame(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())))
        return eof_;
    }
    return false;
  }

  // Reads the challenge, asks for the connection's proof as an agent does, and answers with a hello sealed under the
  // connection's keys (derived from `token`: another token's hello does not open at the server); returns the
  // challenge's nonce. From then on send() seals and read_frame() opens.
  // `edit`, when given, changes the hello before it is sealed (a MUNGE credential over the challenge's nonce).
  std::string handshake(std::optional<int> node_rank, int nproc, const std::string& token = "s3cret",
                        int version = kProtocolVersion, const std::string& run_id = "job42",
                        const std::function<void(HelloMsg&, const ChallengeMsg&)>& edit = nullptr) {
    auto payload = read_frame();
    REQUIRE(payload);
    auto challenge = std::get<ChallengeMsg>(decode_server_message(*payload));
    const std::string agent_nonce = "00112233445566778899aabbccddeeff";
    send(ProveMsg{agent_nonce});
    auto proof = read_frame();
    REQUIRE(proof);
    REQUIRE(std::holds_alternative<ProofMsg>(decode_server_message(*proof)));
    HelloMsg hello;
    hello.version = version;
    hello.run_id = run_id;
    hello.mac = compute_mac(token, challenge.nonce, run_id);
    hello.node_rank = node_rank;
    hello.nproc = nproc;
    hello.host = "rawhost";
    hello.master_port = 29999;
    if (edit) edit(hello, challenge);
    seal_out_ = std::make_unique<FrameSeal>(token, challenge.nonce, agent_nonce, run_id,
                                            FrameSeal::Direction::kAgentToServer);
    seal_in_ = std::make_unique<FrameSeal>(token, challenge.nonce, agent_nonce, run_id,
                                           FrameSeal::Direction::kServerToAgent);
    send(hello);
    return challenge.nonce;
  }

  void close() { socket_.close(); }

 private:
  asio::io_context& io_;
  tcp::socket socket_;
  FrameDecoder decoder_;
  std::array<char, 4096> buffer_{};
  std::optional<std::string> frame_;
  bool eof_ = false;
  std::unique_ptr<FrameSeal> seal_out_;
  std::unique_ptr<FrameSeal> seal_in_;
};

}  // namespace ddprun::rendezvous::testing
