// SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), self-contained: the challenge-response needs one MAC per
// connection, and OpenSSL's libcrypto cost ~2.5 ms of loading and initialisation in every ddprun start
// (measured: a single-node launch is ~10 ms in all). Checked against the FIPS and RFC 4231 vectors.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ddprun::rendezvous {

using Sha256Digest = std::array<unsigned char, 32>;

Sha256Digest sha256(std::string_view data);
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

}  // namespace ddprun::rendezvous
