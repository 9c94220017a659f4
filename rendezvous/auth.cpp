#include "rendezvous/auth.hpp"

#include <sys/random.h>

#include <cerrno>
#include <fstream>

#include "common/error.hpp"
#include "rendezvous/sha256.hpp"

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
  const Sha256Digest digest = hmac_sha256(token, message);
  return to_hex(digest.data(), digest.size());
}

bool verify_mac(std::string_view token, std::string_view nonce, std::string_view run_id, std::string_view mac) {
  std::string expected = compute_mac(token, nonce, run_id);
  if (mac.size() != expected.size()) return false;
  // Constant time: how much of a guess matched must not show in the time taken.
  unsigned char diff = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    diff = static_cast<unsigned char>(diff | (static_cast<unsigned char>(expected[i]) ^ static_cast<unsigned char>(mac[i])));
  return diff == 0;
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  auto* data = reinterpret_cast<unsigned char*>(raw.data());
  // The kernel's CSPRNG; blocks only before it is seeded at boot.
  for (std::size_t done = 0; done < bytes;) {
    const ssize_t n = ::getrandom(data + done, bytes - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SystemError("getrandom", errno);
    done += static_cast<std::size_t>(n);
  }
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
