#include "rendezvous/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cerrno>
#include <fstream>

#include "common/error.hpp"

namespace ddprun::rendezvous {

namespace {
std::string to_hex(const unsigned char* data, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}
}  // namespace

std::string compute_mac(std::string_view token, std::string_view nonce, std::string_view run_id) {
  std::string message = "ddprun-rdzv/1\n";
  message.append(nonce).append("\n").append(run_id);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  const unsigned char* result =
      HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  if (result == nullptr) throw Error("HMAC-SHA256 failed");
  return to_hex(digest, length);
}

bool verify_mac(std::string_view token, std::string_view nonce, std::string_view run_id, std::string_view mac) {
  std::string expected = compute_mac(token, nonce, run_id);
  if (mac.size() != expected.size()) return false;
  return CRYPTO_memcmp(expected.data(), mac.data(), expected.size()) == 0;
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  auto* data = reinterpret_cast<unsigned char*>(raw.data());
  if (RAND_bytes(data, static_cast<int>(bytes)) != 1) throw SystemError("RAND_bytes", EIO);
  return to_hex(data, bytes);
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
