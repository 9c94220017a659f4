#include "rendezvous/framing.hpp"

#include "common/error.hpp"

namespace ddprun::rendezvous {

namespace {
std::uint32_t read_length(const char* p) {
  auto byte = [p](int i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])); };
  return (byte(0) << 24) | (byte(1) << 16) | (byte(2) << 8) | byte(3);
}
}  // namespace

std::string encode_frame(std::string_view payload, std::size_t max_frame_bytes) {
  if (payload.size() > max_frame_bytes)
    throw ProtocolError("frame of " + std::to_string(payload.size()) + " bytes exceeds the limit of " +
                        std::to_string(max_frame_bytes));
  auto n = static_cast<std::uint32_t>(payload.size());
  std::string out;
  out.reserve(kFrameHeaderBytes + payload.size());
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(payload);
  return out;
}

void FrameDecoder::feed(std::string_view bytes) {
  // Compact before growing so a long-lived connection's buffer stays the size of one frame.
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(bytes);
  check_header();
}

void FrameDecoder::check_header() const {
  if (buffer_.size() - consumed_ < kFrameHeaderBytes) return;
  std::uint32_t length = read_length(buffer_.data() + consumed_);
  if (length > max_frame_bytes_)
    throw ProtocolError("peer announced a frame of " + std::to_string(length) + " bytes; the limit is " +
                        std::to_string(max_frame_bytes_));
}

std::optional<std::string> FrameDecoder::next() {
  std::size_t available = buffer_.size() - consumed_;
  if (available < kFrameHeaderBytes) return std::nullopt;
  check_header();
  std::uint32_t length = read_length(buffer_.data() + consumed_);
  if (available < kFrameHeaderBytes + length) return std::nullopt;
  std::string payload = buffer_.substr(consumed_ + kFrameHeaderBytes, length);
  consumed_ += kFrameHeaderBytes + length;
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  // The next frame's header, if already here, is checked by the next call (or feed): the caller may raise
  // the limit in between, as the server does when this frame was an accepted hello.
  return payload;
}

}  // namespace ddprun::rendezvous
