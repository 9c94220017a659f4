// One agent's connection at the server: reads frames, writes queued frames, reports both to its owner.
//
// It never interprets a message: payloads go up to the Server, which turns them into state-machine events.
// Outgoing frames are shared_ptrs so a broadcast to 10k nodes encodes its frame once.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "rendezvous/frame_seal.hpp"
#include "rendezvous/framing.hpp"

namespace ddprun::rendezvous {

using Frame = std::shared_ptr<const std::string>;

// What a connection tells the server. The server detaches itself (detach()) before it goes away.
class ConnectionOwner {
 public:
  virtual void on_payload(std::uint64_t conn, std::string payload) = 0;
  virtual void on_closed(std::uint64_t conn, const std::string& reason) = 0;

 protected:
  ~ConnectionOwner() = default;
};

class ServerConnection : public std::enable_shared_from_this<ServerConnection> {
 public:
  // Reads frames of at most kHandshakeMaxFrameBytes until authenticated(); a peer that leaves more than
  // max_outbox_bytes unread is closed (as lost) rather than buffered for.
  ServerConnection(boost::asio::ip::tcp::socket socket, std::uint64_t id, std::size_t max_frame_bytes,
                   std::size_t max_outbox_bytes, ConnectionOwner* owner);

  void start();                 // begins reading
  void send(Frame frame);       // queued; written in order; closes the connection if the outbox is full
  void authenticated();         // its hello was accepted: frames up to max_frame_bytes from now on
  // From the agent's hello on, every frame each way carries its tag (frame_seal.hpp): `in` opens what comes (its
  // first frame already opened, the hello), `out` seals what goes. A frame whose tag fails closes the connection.
  void seal(std::unique_ptr<FrameSeal> in, std::unique_ptr<FrameSeal> out);
  bool sealed() const { return seal_in_ != nullptr; }
  void close_after_flush();     // once every queued frame is written: FIN, then close at the peer's EOF
  bool closing() const { return closing_; }
  void close(const std::string& reason);  // closes now; the owner hears on_closed once
  void detach() { owner_ = nullptr; }

  std::uint64_t id() const { return id_; }
  const std::string& peer_address() const { return peer_address_; }
  const std::string& local_address() const { return local_address_; }
  // Per-connection handshake state kept here so the server needs no second map.
  std::string nonce;
  std::string agent_nonce;  // the agent's, from its ProveMsg: with ours, the frame keys' freshness
  bool greeted = false;  // its hello has reached the state machine
  bool proved = false;   // it asked for this connection's proof (ProveMsg), answered once
  bool joined = false;   // ... and was accepted: a node of the job, not a stranger
  bool said_foreign_paces = false;  // the warning about paces of ranks not its own, once
  bool reset_by_peer = false;  // it ended with the peer's reset: an agent that gave this server up, not an exit

 private:
  void read_some();
  void write_next();
  void half_close();

  boost::asio::ip::tcp::socket socket_;
  std::uint64_t id_;
  ConnectionOwner* owner_;
  FrameDecoder decoder_;
  std::unique_ptr<FrameSeal> seal_in_;
  std::unique_ptr<FrameSeal> seal_out_;
  std::array<char, 1024> read_buffer_{};  // small: 10k connections each hold one
  std::deque<Frame> outbox_;
  // Bytes queued and not yet written, each frame counted with its bookkeeping (a 30-byte heartbeat reply
  // costs ~100 bytes of heap), so a peer that sends heartbeats and never reads hits the bound too.
  std::size_t outbox_bytes_ = 0;
  std::size_t max_outbox_bytes_;
  std::size_t max_frame_bytes_;
  bool writing_ = false;
  bool closing_ = false;  // close_after_flush requested
  bool closed_ = false;
  bool overflowed_ = false;  // outbox bound hit: closing on the next turn of the loop
  std::string peer_address_;
  std::string local_address_;
};

// "10.0.0.1" for IPv4 and IPv4-mapped IPv6 addresses, the plain text otherwise.
std::string address_text(const boost::asio::ip::address& address);

}  // namespace ddprun::rendezvous
