// Framing: each message is a 4-byte big-endian payload length followed by that many bytes of JSON.
//
// Kept apart from any socket so it is tested byte by byte. A peer announcing a frame larger than the limit
// is refused before a byte of it is buffered, so a hostile or confused peer cannot make the server allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::rendezvous {

inline constexpr std::size_t kFrameHeaderBytes = 4;
// Large enough for a failure with a 64 KiB error file; small enough that 10k peers cannot exhaust memory.
inline constexpr std::size_t kDefaultMaxFrameBytes = 1024 * 1024;
// Until a peer has authenticated it may send only a hello (~400 bytes with the longest host, address and run
// id the decoder accepts): so a stranger costs the server a few KiB, not a megabyte (server.cpp).
inline constexpr std::size_t kHandshakeMaxFrameBytes = 4 * 1024;

// Header + payload, ready to write. Throws ProtocolError if the payload exceeds max_frame_bytes.
std::string encode_frame(std::string_view payload, std::size_t max_frame_bytes = kDefaultMaxFrameBytes);

// Incremental decoder: feed bytes as they arrive, take whole payloads out.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_frame_bytes = kDefaultMaxFrameBytes) : max_frame_bytes_(max_frame_bytes) {}

  // Appends received bytes. Throws ProtocolError as soon as a header announces an oversized frame.
  void feed(std::string_view bytes);
  // The next complete payload, if one has fully arrived. Throws ProtocolError if the next header announces
  // an oversized frame (checked against the limit in force now, see set_max_frame_bytes).
  std::optional<std::string> next();
  // Changes the limit for the frames not yet handed out: the server raises it once a peer authenticated.
  void set_max_frame_bytes(std::size_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }
  // True while part of a frame is buffered: an end of stream now means a truncated frame.
  bool mid_frame() const { return buffer_.size() > consumed_; }

 private:
  void check_header() const;

  std::size_t max_frame_bytes_;
  std::string buffer_;
  std::size_t consumed_ = 0;  // bytes of buffer_ already handed out; compacted lazily
};

}  // namespace ddprun::rendezvous
