#include "rendezvous/auth.hpp"

#include <sodium.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "common/error.hpp"

namespace ddprun::rendezvous {

namespace {

// sodium_init() once per process (a function-local static is initialised once, thread-safely), and only
// when a MAC or random bytes are first needed: a ddprun that never authenticates does not pay for it.
void ensure_sodium() {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw Error("libsodium could not be initialised (no randomness source?)");
}

std::string to_hex(const unsigned char* data, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

const unsigned char* bytes_of(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

}  // namespace

Sha256Digest hmac_sha256(std::string_view key, std::string_view message) {
  ensure_sodium();
  // The streaming API takes a key of any length (a longer one is hashed first, as RFC 2104 says); the
  // one-shot crypto_auth_hmacsha256 wants exactly 32 bytes, and tokens are whatever the user wrote.
  crypto_auth_hmacsha256_state state;
  Sha256Digest digest{};
  crypto_auth_hmacsha256_init(&state, bytes_of(key), key.size());
  crypto_auth_hmacsha256_update(&state, bytes_of(message), message.size());
  crypto_auth_hmacsha256_final(&state, digest.data());
  sodium_memzero(&state, sizeof state);
  return digest;
}

namespace {
std::string labelled_mac(std::string_view label, std::string_view token, std::string_view nonce,
                         std::string_view run_id) {
  std::string message(label);
  message.append("\n").append(nonce).append("\n").append(run_id);
  const Sha256Digest digest = hmac_sha256(token, message);
  return to_hex(digest.data(), digest.size());
}

// The length is public (always 64 hex digits); the contents are compared in constant time.
bool same_mac(const std::string& expected, std::string_view mac) {
  if (mac.size() != expected.size()) return false;
  return sodium_memcmp(expected.data(), mac.data(), expected.size()) == 0;
}

constexpr std::string_view kClientLabel = "ddprun-rdzv/1";
constexpr std::string_view kServerLabel = "ddprun-rdzv/1 server";
}  // namespace

std::string compute_mac(std::string_view token, std::string_view nonce, std::string_view run_id) {
  return labelled_mac(kClientLabel, token, nonce, run_id);
}

bool verify_mac(std::string_view token, std::string_view nonce, std::string_view run_id, std::string_view mac) {
  return same_mac(compute_mac(token, nonce, run_id), mac);
}

std::string compute_server_proof(std::string_view token, std::string_view nonce, std::string_view run_id) {
  return labelled_mac(kServerLabel, token, nonce, run_id);
}

bool verify_server_proof(std::string_view token, std::string_view nonce, std::string_view run_id,
                         std::string_view proof) {
  return same_mac(compute_server_proof(token, nonce, run_id), proof);
}

std::string random_hex(std::size_t bytes) {
  ensure_sodium();
  std::string raw(bytes, '\0');
  randombytes_buf(raw.data(), bytes);
  return to_hex(bytes_of(raw), bytes);
}

std::string compute_connection_proof(std::string_view token, std::string_view server_nonce,
                                     std::string_view agent_nonce, std::string_view run_id,
                                     std::string_view settings) {
  std::string covered(server_nonce);
  covered.append("\n").append(agent_nonce).append("\n").append(settings);
  return labelled_mac("ddprun-rdzv/2 connection", token, covered, run_id);
}

bool verify_connection_proof(std::string_view token, std::string_view server_nonce, std::string_view agent_nonce,
                             std::string_view run_id, std::string_view settings, std::string_view proof) {
  return same_mac(compute_connection_proof(token, server_nonce, agent_nonce, run_id, settings), proof);
}

std::string seat_commitment(std::string_view secret) {
  const Sha256Digest digest = hmac_sha256("ddprun-rdzv/1 seat", secret);
  return to_hex(digest.data(), digest.size());
}

bool seat_secret_matches(std::string_view commitment, std::string_view secret) {
  return !commitment.empty() && same_mac(seat_commitment(secret), commitment);
}

std::string run_id_token(std::string_view run_id) { return "ddprun-run-id-token:" + std::string(run_id); }

bool is_run_id_token(std::string_view token, std::string_view run_id) { return token == run_id_token(run_id); }

std::string scoped_token(std::string_view token, std::string_view scope) {
  const Sha256Digest digest = hmac_sha256(token, "ddprun-rdzv/1 scope\n" + std::string(scope));
  return to_hex(digest.data(), digest.size());
}

std::string given_token(const std::string& option, const std::string& file, const std::string& environment) {
  if (!option.empty()) return option;
  if (!file.empty()) return read_token_file(file);
  return environment;
}

std::string token_file_warning(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & (S_IRWXG | S_IRWXO)) == 0) return "";
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  const char* who = (st.st_mode & S_IROTH)   ? "every user of this machine"
                    : (st.st_mode & S_IRGRP) ? "its group"
                                             : "writes by users other than its owner";
  return "warning: token file " + path + " is open to " + who + " (mode " + mode + "): whoever reads it can join " +
         "this job or answer as its rendezvous server; chmod 600 " + path;
}

std::string read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read token file " + path);
  std::string line;
  std::getline(in, line);
  auto first = line.find_first_not_of(" \t\r\n");
  auto last = line.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) throw Error("token file " + path + " is empty");
  return line.substr(first, last - first + 1);
}

}  // namespace ddprun::rendezvous
