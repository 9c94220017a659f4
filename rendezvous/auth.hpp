// Challenge–response authentication: an agent proves it holds the job token without sending it.
//
// The server sends a fresh random nonce per connection; the agent answers
//   mac = hex(HMAC-SHA256(key = token, message = "ddprun-rdzv/1" LF nonce LF run_id))
// Binding the run id into the MAC stops a response for one job from being replayed into another, and the
// per-connection nonce stops replay within a job. Comparison is constant-time. The primitives are
// libsodium's (HMAC-SHA256, sodium_memcmp, randombytes_buf): reviewed code, not ours.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace ddprun::rendezvous {

std::string compute_mac(std::string_view token, std::string_view nonce, std::string_view run_id);
bool verify_mac(std::string_view token, std::string_view nonce, std::string_view run_id, std::string_view mac);

// The server's side, sent in its challenge: proof = hex(HMAC-SHA256(token, "ddprun-rdzv/1 server" LF nonce LF
// run_id)). A node that tries several candidate ports (a SLURM step: common/process/ports.hpp) reads it to tell
// its own job's server from another job's before saying anything: a server of another run, or with another
// token, cannot make it. With the run id's fallback token it proves only the run id, as the MAC does.
std::string compute_server_proof(std::string_view token, std::string_view nonce, std::string_view run_id);
bool verify_server_proof(std::string_view token, std::string_view nonce, std::string_view run_id,
                         std::string_view proof);

// A node's seat in the job (issue 33: a resume claim bound to the node that held it). Each agent draws a secret
// (random_hex(32)) once and sends only its commitment, hex(HMAC-SHA256("ddprun-rdzv/1 seat", secret)), in every
// hello; the server keeps the commitment with the node's place. To take that place back (a resume hello into a
// running round, after its own connection was given up) the claim must carry the secret itself: another token
// holder, who never saw it, cannot. Compared in constant time.
std::string seat_commitment(std::string_view secret);
bool seat_secret_matches(std::string_view commitment, std::string_view secret);

// The challenge's proof covers only the server's nonce: a stranger who once connected could replay a recorded
// challenge from the port (found writing docs/SECURITY.md). So before its hello an agent sends a nonce of its own
// (ProveMsg) and believes the server only once it answers with
// hex(HMAC-SHA256(token, "ddprun-rdzv/2 connection" LF server nonce LF agent nonce LF settings LF run_id))
// (ProofMsg), `settings` being every setting the challenge imposes (protocol.hpp challenge_settings): a relay that
// replayed a challenge with a 24 h heartbeat timeout held agents waiting on it (issue 55).
std::string compute_connection_proof(std::string_view token, std::string_view server_nonce,
                                     std::string_view agent_nonce, std::string_view run_id,
                                     std::string_view settings);
bool verify_connection_proof(std::string_view token, std::string_view server_nonce, std::string_view agent_nonce,
                             std::string_view run_id, std::string_view settings, std::string_view proof);

// HMAC-SHA256 with a key of any length (RFC 2104; RFC 4231 vectors in tests/rendezvous/auth_test.cpp).
using Sha256Digest = std::array<unsigned char, 32>;
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

// `bytes` random bytes from the OS's CSPRNG, hex-encoded. Throws ddprun::Error if libsodium cannot start.
std::string random_hex(std::size_t bytes);
// A fresh job token for --standalone (256 bits).
inline std::string generate_token() { return random_hex(32); }
// A nonce for one challenge (128 bits).
inline std::string generate_nonce() { return random_hex(16); }

// The token a multi-node job falls back to when none is given: derived from the run id, so it keeps another
// job's agents out but not a stranger who knows (or guesses) the run id. The server warns when it listens
// beyond loopback with it (server.cpp). The launcher builds its fallback with this function.
std::string run_id_token(std::string_view run_id);
bool is_run_id_token(std::string_view token, std::string_view run_id);

// The token bound to a scope every node of one world shares and no other world has ("slurm job 42 step 3"):
// hex(HMAC-SHA256(token, "ddprun-rdzv/1 scope" LF scope)). Two SLURM steps given one run id then hold
// different tokens, and neither's agents trust the other's server (its proof fails).
std::string scoped_token(std::string_view token, std::string_view scope);

// Reads a token file: the first line, surrounding whitespace stripped. Throws ddprun::Error naming the file
// when it cannot be read or is empty.
std::string read_token_file(const std::string& path);

// "" when the token file is open to nobody but its owner; else the warning to give, naming the file, its mode
// and the fix ("chmod 600 FILE"): any user who can read it can join the job as a node, or stand in for its
// server. A warning, not a refusal (ssh refuses a private key that others can read): a token file in a shared
// home directory of a cluster whose nodes all run as one account is common, and the job must still start.
std::string token_file_warning(const std::string& path);

// The job token a user gave, as ddprun and ddprun-rendezvous both take it (they once read it in opposite
// orders, so one setting meant two tokens): the option's value, else the token file's first line, else the
// environment's DDPRUN_TOKEN; "" when none is given. Throws ddprun::Error when the file cannot be read.
std::string given_token(const std::string& option, const std::string& file, const std::string& environment);

}  // namespace ddprun::rendezvous
