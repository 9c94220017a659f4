// Every frame after the handshake authenticated (issue 55): a relay that passed the challenge and the proofs through
// between an agent and its server held no key, and rewrote what it liked after them (a worker's MASTER_ADDR, a stop
// naming "node 9 (host evil)").
//
// Both ends derive one key per direction from what only they share and what is fresh in this connection:
//   key = HMAC-SHA256(token, "ddprun-rdzv/2 frames" SP direction LF server nonce LF agent nonce LF run id)
// (direction "agent" or "server", so a frame cannot be reflected back to its sender). From the agent's hello on,
// each frame's payload is followed by a tag:
//   tag = HMAC-SHA256(key, sequence number as 8 bytes big-endian || payload)
// the sequence counting that direction's frames from 0, never sent: a frame altered, replayed, dropped or
// reordered fails the next check, and the connection ends as a protocol error. libsodium's HMAC-SHA256 (the same
// primitive as the proofs, auth.hpp), compared in constant time. Integrity, not secrecy: the frames stay readable
// (a job's addresses and exit codes are no secret from whoever sees its traffic; docs/SECURITY.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <sodium.h>

namespace ddprun::rendezvous {

inline constexpr std::size_t kSealTagBytes = 32;

class FrameSeal {
 public:
  enum class Direction { kAgentToServer, kServerToAgent };
  FrameSeal(std::string_view token, std::string_view server_nonce, std::string_view agent_nonce,
            std::string_view run_id, Direction direction);
  ~FrameSeal();
  FrameSeal(const FrameSeal&) = delete;
  FrameSeal& operator=(const FrameSeal&) = delete;

  // The payload with its tag appended: the next frame this end sends.
  std::string seal(std::string_view payload);
  // The same tag, written to `out` (kSealTagBytes), for a frame built in place (seal_frame).
  void seal_into(std::string_view payload, unsigned char* out);
  // The next frame this end receives: true, and `payload` without its tag, when the tag is this sequence's;
  // false (payload untouched, the sequence not advanced) otherwise.
  bool open(std::string& payload);
  std::uint64_t sequence() const { return sequence_; }

 private:
  std::array<unsigned char, 32> tag_of(std::string_view payload) const;

  // HMAC's keyed state, made once: each frame's tag starts from a copy (two of SHA-256's four blocks per small frame
  // saved: the steady-state benchmark's server, 10 000 nodes, docs/BENCHMARKS.md).
  crypto_auth_hmacsha256_state keyed_{};
  std::uint64_t sequence_ = 0;
};

// A whole frame (header + payload, framing.hpp) sealed: its payload re-framed with the tag. No size check beyond the
// header's: the payload was checked against the frame limit when it was first framed.
std::string seal_frame(FrameSeal& seal, std::string_view frame);

}  // namespace ddprun::rendezvous
