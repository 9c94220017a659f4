#include "rendezvous/frame_seal.hpp"

#include <sodium.h>

#include <algorithm>

#include "rendezvous/auth.hpp"
#include "rendezvous/framing.hpp"

namespace ddprun::rendezvous {

namespace {
const unsigned char* bytes_of(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }
}  // namespace

FrameSeal::FrameSeal(std::string_view token, std::string_view server_nonce, std::string_view agent_nonce,
                     std::string_view run_id, Direction direction) {
  std::string label = direction == Direction::kAgentToServer ? "ddprun-rdzv/2 frames agent"
                                                             : "ddprun-rdzv/2 frames server";
  label.append("\n").append(server_nonce).append("\n").append(agent_nonce).append("\n").append(run_id);
  Sha256Digest key = hmac_sha256(token, label);  // initialises libsodium too
  crypto_auth_hmacsha256_init(&keyed_, key.data(), key.size());
  sodium_memzero(key.data(), key.size());
}

FrameSeal::~FrameSeal() { sodium_memzero(&keyed_, sizeof keyed_); }

std::array<unsigned char, 32> FrameSeal::tag_of(std::string_view payload) const {
  unsigned char sequence[8];
  for (int i = 0; i < 8; ++i) sequence[i] = static_cast<unsigned char>(sequence_ >> (56 - 8 * i));
  crypto_auth_hmacsha256_state state = keyed_;
  std::array<unsigned char, 32> tag{};
  crypto_auth_hmacsha256_update(&state, sequence, sizeof sequence);
  crypto_auth_hmacsha256_update(&state, bytes_of(payload), payload.size());
  crypto_auth_hmacsha256_final(&state, tag.data());
  sodium_memzero(&state, sizeof state);
  return tag;
}

void FrameSeal::seal_into(std::string_view payload, unsigned char* out) {
  const auto tag = tag_of(payload);
  ++sequence_;
  std::copy(tag.begin(), tag.end(), out);
}

std::string FrameSeal::seal(std::string_view payload) {
  const auto tag = tag_of(payload);
  ++sequence_;
  std::string sealed;
  sealed.reserve(payload.size() + tag.size());
  sealed.append(payload).append(reinterpret_cast<const char*>(tag.data()), tag.size());
  return sealed;
}

bool FrameSeal::open(std::string& payload) {
  if (payload.size() < kSealTagBytes) return false;
  const std::string_view body(payload.data(), payload.size() - kSealTagBytes);
  const auto expected = tag_of(body);
  if (sodium_memcmp(expected.data(), payload.data() + body.size(), kSealTagBytes) != 0) return false;
  ++sequence_;
  payload.resize(body.size());
  return true;
}

// One allocation: the header rewritten for the longer payload, the payload, the tag.
std::string seal_frame(FrameSeal& seal, std::string_view frame) {
  const std::string_view payload = frame.substr(kFrameHeaderBytes);
  const std::size_t length = payload.size() + kSealTagBytes;
  std::string sealed(kFrameHeaderBytes + length, '\0');
  for (std::size_t i = 0; i < kFrameHeaderBytes; ++i)
    sealed[i] = static_cast<char>((length >> (8 * (kFrameHeaderBytes - 1 - i))) & 0xff);
  std::copy(payload.begin(), payload.end(), sealed.begin() + kFrameHeaderBytes);
  seal.seal_into(payload, reinterpret_cast<unsigned char*>(&sealed[kFrameHeaderBytes + payload.size()]));
  return sealed;
}

}  // namespace ddprun::rendezvous
