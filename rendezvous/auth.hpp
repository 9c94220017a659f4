// Challenge–response authentication: an agent proves it holds the job token without sending it.
//
// The server sends a fresh random nonce per connection; the agent answers
//   mac = hex(HMAC-SHA256(key = token, message = "ddprun-rdzv/1" LF nonce LF run_id))
// Binding the run id into the MAC stops a response for one job from being replayed into another, and the
// per-connection nonce stops replay within a job. Comparison is constant-time.
#pragma once

#include <string>
#include <string_view>

namespace ddprun::rendezvous {

std::string compute_mac(std::string_view token, std::string_view nonce, std::string_view run_id);
bool verify_mac(std::string_view token, std::string_view nonce, std::string_view run_id, std::string_view mac);

// `bytes` random bytes from the OS's CSPRNG, hex-encoded. Throws ddprun::SystemError if none are available.
std::string random_hex(std::size_t bytes);
// A fresh job token for --standalone (256 bits).
inline std::string generate_token() { return random_hex(32); }
// A nonce for one challenge (128 bits).
inline std::string generate_nonce() { return random_hex(16); }

// Reads a token file: the first line, surrounding whitespace stripped. Throws ddprun::Error naming the file
// when it cannot be read or is empty.
std::string read_token_file(const std::string& path);

}  // namespace ddprun::rendezvous
