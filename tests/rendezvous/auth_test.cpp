#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.hpp"
#include "rendezvous/auth.hpp"

using namespace ddprun::rendezvous;

TEST_CASE("the mac is HMAC-SHA256 over the nonce and run id") {
  // Reference: python3 -c 'import hmac,hashlib;print(hmac.new(b"key",b"ddprun-rdzv/1\nn1\njob",hashlib.sha256).hexdigest())'
  CHECK(compute_mac("key", "n1", "job") == "b17e3adf0e9f10db7d32d3ca27ff49ff27c80671500b175e4905026ea6d02062");
}

TEST_CASE("a mac verifies only with the same token, nonce and run id") {
  std::string mac = compute_mac("secret", "nonce", "run");
  CHECK(verify_mac("secret", "nonce", "run", mac));
  CHECK_FALSE(verify_mac("other", "nonce", "run", mac));
  CHECK_FALSE(verify_mac("secret", "nonce2", "run", mac));
  CHECK_FALSE(verify_mac("secret", "nonce", "run2", mac));
  CHECK_FALSE(verify_mac("secret", "nonce", "run", mac.substr(1)));
  CHECK_FALSE(verify_mac("secret", "nonce", "run", ""));
}

TEST_CASE("generated tokens and nonces are fresh hex strings") {
  std::string a = generate_token(), b = generate_token();
  CHECK(a.size() == 64);
  CHECK(a != b);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(generate_nonce().size() == 32);
}

TEST_CASE("a token file's first line is the token, whitespace stripped") {
  std::string path = "/tmp/ddprun_rdzv_token_test_" + std::to_string(::getpid());
  { std::ofstream(path) << "  s3cret \nsecond line\n"; }
  CHECK(read_token_file(path) == "s3cret");
  { std::ofstream(path) << "\n"; }
  CHECK_THROWS_AS(read_token_file(path), ddprun::Error);
  std::remove(path.c_str());
  CHECK_THROWS_AS(read_token_file(path), ddprun::Error);
}

// Issue 33: nothing checked the token file's mode; a token others can read lets them join the job or stand in
// for its server. Both programs warn (launcher/topology.cpp, rendezvous/server_main.cpp).
TEST_CASE("a token file open to others gets a warning naming the file, its mode and the fix") {
  std::string path = "/tmp/ddprun_rdzv_token_mode_test_" + std::to_string(::getpid());
  { std::ofstream(path) << "s3cret\n"; }
  ::chmod(path.c_str(), 0600);
  CHECK(token_file_warning(path).empty());
  ::chmod(path.c_str(), 0400);
  CHECK(token_file_warning(path).empty());
  ::chmod(path.c_str(), 0644);
  CHECK(token_file_warning(path) == "warning: token file " + path + " is open to every user of this machine (mode "
                                    "0644): whoever reads it can join this job or answer as its rendezvous server; "
                                    "chmod 600 " + path);
  ::chmod(path.c_str(), 0640);
  CHECK(token_file_warning(path).find("is open to its group (mode 0640)") != std::string::npos);
  ::chmod(path.c_str(), 0620);
  CHECK(token_file_warning(path).find("writes by users other than its owner (mode 0620)") != std::string::npos);
  CHECK(read_token_file(path) == "s3cret");  // a warning, not a refusal
  std::remove(path.c_str());
  CHECK(token_file_warning(path).empty());  // no file: read_token_file says so
}

// Issue 31: ddprun took flag > file > environment, ddprun-rendezvous flag > environment > file; DDPRUN_TOKEN=A
// with a token file holding B gave each program another token (exit 77 "wrong job token").
TEST_CASE("the token given: the option, then the file, then the environment, for both programs") {
  std::string path = "/tmp/ddprun_rdzv_given_token_test_" + std::to_string(::getpid());
  { std::ofstream(path) << "from-file\n"; }
  CHECK(given_token("from-option", path, "from-env") == "from-option");
  CHECK(given_token("", path, "from-env") == "from-file");
  CHECK(given_token("", "", "from-env") == "from-env");
  CHECK(given_token("", "", "") == "");
  std::remove(path.c_str());
  CHECK_THROWS_AS(given_token("", path, "from-env"), ddprun::Error);  // a file that cannot be read is no fallback
}

namespace {
std::string hex(const Sha256Digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : d) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xf]);
  }
  return out;
}
}  // namespace

TEST_CASE("hmac_sha256 matches RFC 4231 (short key, key longer than a block)") {
  CHECK(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("the fallback token derived from the run id is recognised as such") {
  CHECK(run_id_token("job") == "ddprun-run-id-token:job");
  CHECK(is_run_id_token(run_id_token("job"), "job"));
  CHECK_FALSE(is_run_id_token(run_id_token("job"), "job2"));
  CHECK_FALSE(is_run_id_token("s3cret", "job"));
}
