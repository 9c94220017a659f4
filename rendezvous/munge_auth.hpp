// MUNGE authentication of a joining node: it proves the uid it runs as, bound to the run and the server's nonce.
//
// Inside a SLURM cluster every node runs munged with the cluster's shared key. A credential made by
// munge_encode on one node names the uid and gid of the process that asked for it, and only a munged with
// the same key can decode it. The agent encodes
//   payload = "ddprun-rdzv/1 munge" LF nonce LF run_id
// and the server decodes it, then checks the payload (this connection's nonce, this run) and that the uid is
// the server's own. MUNGE adds its own checks: the credential's time-to-live (300 s by default) and a replay
// cache (a credential decodes once). The agent restricts decoding to its own uid (MUNGE_OPT_UID_RESTRICTION),
// so a server of another user cannot even read the credential. Root is not special: a credential of uid 0
// is accepted only by a server that runs as root itself.
//
// libmunge talks to munged over a Unix socket, synchronously (a round trip, ~0.1 ms; up to ~2 s of
// libmunge's own retries when the socket file exists and munged is dead). `socket` empty = libmunge's
// default (/run/munge/munge.socket.2); ddprun takes another from DDPRUN_MUNGE_SOCKET.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/error.hpp"

namespace ddprun::rendezvous {

// munged cannot be reached, or refused to make a credential. The message names the socket and says why.
class MungeError : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// What the credential's payload must say for this connection.
std::string munge_payload(std::string_view nonce, std::string_view run_id);

// A credential (base64 text) for this nonce and run, decodable only by this process's uid. Throws MungeError.
std::string make_munge_credential(const std::string& socket, std::string_view nonce, std::string_view run_id);

struct MungeCheck {
  bool ok = false;
  std::string problem;  // why not, for the server's log (never sent to the peer)
  uid_t uid = static_cast<uid_t>(-1);  // the credential's uid, when it decoded
};

// Decodes `credential` and checks its payload against (nonce, run_id) and its uid against `expected_uid`.
MungeCheck check_munge_credential(const std::string& socket, const std::string& credential, std::string_view nonce,
                                  std::string_view run_id, uid_t expected_uid);

// "" when munged answers at `socket` (it made a credential), else why not.
std::string munge_unavailable_reason(const std::string& socket);

// The socket as a user reads it: `socket`, or libmunge's default when empty.
std::string munge_socket_text(const std::string& socket);

}  // namespace ddprun::rendezvous
