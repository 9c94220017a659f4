// The user's own private directory for run-time files other users must not reach: $XDG_RUNTIME_DIR/ddprun when
// XDG_RUNTIME_DIR is set (a login session's /run/user/<uid>), else /tmp/ddprun-<uid>. Made 0700 when missing;
// used only when it is a directory (not a link), owned by this user, with no permission for anyone else: another
// user who made /tmp/ddprun-<uid> first cannot have ddprun's sockets or files put where they can reach them.
// The live view's sockets (agent/status_socket.hpp) and ddprun-rendezvous' remembered round
// (rendezvous/remembered_round.hpp) live there.
#pragma once

#include <string>

namespace ddprun {

// The directory; "" with `problem` set (one sentence, saying what to do) when it is unsafe or cannot be made.
std::string private_runtime_dir(std::string& problem);

}  // namespace ddprun
