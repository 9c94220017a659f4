#include "rendezvous/server_connection.hpp"

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

ServerConnection::ServerConnection(asio::ip::tcp::socket socket, std::uint64_t id, std::size_t max_frame_bytes,
                                   ConnectionOwner* owner)
    : socket_(std::move(socket)), id_(id), owner_(owner), decoder_(max_frame_bytes) {
  error_code ec;
  auto remote = socket_.remote_endpoint(ec);
  if (!ec) peer_address_ = address_text(remote.address());
  auto local = socket_.local_endpoint(ec);
  if (!ec) local_address_ = address_text(local.address());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);  // small messages; a stop order must not wait
}

void ServerConnection::start() { read_some(); }

void ServerConnection::read_some() {
  socket_.async_read_some(asio::buffer(read_buffer_), [self = shared_from_this()](error_code ec, std::size_t n) {
    if (self->closed_) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;  // shutdown
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
  if (owner_) owner_->on_closed(id_, reason);
}

}  // namespace ddprun::rendezvous
