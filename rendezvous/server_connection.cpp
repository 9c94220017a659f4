#include "rendezvous/server_connection.hpp"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "common/error.hpp"

namespace ddprun::rendezvous {

namespace asio = boost::asio;
using boost::system::error_code;

std::string address_text(const asio::ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6()).to_string();
  return address.to_string();
}

namespace {
constexpr std::size_t kPerFrameOverhead = 96;  // deque slot + shared_ptr control block + string header
std::size_t cost_of(const Frame& frame) { return frame->size() + kPerFrameOverhead; }
}  // namespace

ServerConnection::ServerConnection(asio::ip::tcp::socket socket, std::uint64_t id, std::size_t max_frame_bytes,
                                   std::size_t max_outbox_bytes, ConnectionOwner* owner)
    : socket_(std::move(socket)), id_(id), owner_(owner),
      decoder_(std::min(max_frame_bytes, kHandshakeMaxFrameBytes) + kSealTagBytes), max_outbox_bytes_(max_outbox_bytes),
      max_frame_bytes_(max_frame_bytes) {
  error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  if (!ec) peer_address_ = address_text(remote.address());
  auto local = socket_.local_endpoint(ec);
  if (!ec) local_address_ = address_text(local.address());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);  // small messages; a stop order must not wait
}

void ServerConnection::start() { read_some(); }

void ServerConnection::authenticated() {
  joined = true;
  decoder_.set_max_frame_bytes(max_frame_bytes_ + kSealTagBytes);
}

void ServerConnection::seal(std::unique_ptr<FrameSeal> in, std::unique_ptr<FrameSeal> out) {
  seal_in_ = std::move(in);
  seal_out_ = std::move(out);
}

void ServerConnection::read_some() {
  socket_.async_read_some(asio::buffer(read_buffer_), [self = shared_from_this()](error_code ec, std::size_t n) {
    if (self->closed_) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;  // shutdown
      self->reset_by_peer = ec == asio::error::connection_reset;
      bool truncated = self->decoder_.mid_frame();
      self->close(ec == asio::error::eof ? (truncated ? "truncated frame at end of stream" : "end of stream")
                                         : ec.message());
      return;
    }
    try {
      self->decoder_.feed(std::string_view(self->read_buffer_.data(), n));
      while (auto payload = self->decoder_.next()) {
        if (self->closed_ || !self->owner_) return;
        if (self->closing_) continue;  // the server is done with this peer; drain until it hangs up
        if (self->seal_in_ && !self->seal_in_->open(*payload))
          throw ProtocolError("frame " + std::to_string(self->seal_in_->sequence()) + " failed its authentication "
                              "(altered, replayed, dropped or reordered on the way: a relay between the agent and "
                              "this server?)");
        self->owner_->on_payload(self->id_, std::move(*payload));
      }
    } catch (const ProtocolError& e) {
      self->close(e.what());
      return;
    }
    if (!self->closed_) self->read_some();
  });
}

void ServerConnection::send(Frame frame) {
  if (closed_ || closing_) return;
  // A broadcast's frame is encoded once; each sealed connection tags its own copy (its key, its sequence).
  if (seal_out_) frame = std::make_shared<const std::string>(seal_frame(*seal_out_, *frame));
  // A peer that does not read would make us buffer without end (measured: 125 MB/s of heartbeat replies).
  // A node that cannot take its messages is as good as lost: close it, and the state machine hears so.
  if (overflowed_) return;
  if (outbox_bytes_ + cost_of(frame) > max_outbox_bytes_) {
    // Closed from the loop, not here: send() runs while the server applies a step's actions, and closing
    // reports a lost node, which is a step of its own.
    overflowed_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->close("the peer does not read: over " + std::to_string(self->max_outbox_bytes_ / 1024) +
                  " KiB unsent");
    });
    return;
  }
  outbox_bytes_ += cost_of(frame);
  outbox_.push_back(std::move(frame));
  if (!writing_) write_next();
}

void ServerConnection::write_next() {
  if (outbox_.empty()) {
    writing_ = false;
    if (closing_) half_close();
    return;
  }
  writing_ = true;
  const Frame& frame = outbox_.front();
  asio::async_write(socket_, asio::buffer(*frame), [self = shared_from_this()](error_code ec, std::size_t) {
    if (self->closed_) return;
    if (ec) {
      if (ec != asio::error::operation_aborted) self->close(ec.message());
      return;
    }
    self->outbox_bytes_ -= cost_of(self->outbox_.front());
    self->outbox_.pop_front();
    self->write_next();
  });
}

void ServerConnection::close_after_flush() {
  closing_ = true;
  if (!writing_) half_close();
}

void ServerConnection::half_close() {
  // Closing outright with unread input pending would send a RST, and a RST can destroy the last frame
  // (a refusal's reason) before the peer reads it. So: FIN, keep reading until the peer hangs up; the
  // server force-closes a peer that never does (Server's linger sweep).
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

void ServerConnection::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  outbox_.clear();
  outbox_bytes_ = 0;
  if (owner_) owner_->on_closed(id_, reason);
}

}  // namespace ddprun::rendezvous
