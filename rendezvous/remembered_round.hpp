// Where ddprun-rendezvous keeps the round it runs (RememberedRound, protocol.hpp), so that its restart on the same
// machine takes the round back only from the agents that held it (issue 33: a token holder that claimed another
// node's place first was given it, and the honest node was refused as a duplicate). One file per run id and port
// in the user's private runtime directory (common/runtime_dir.hpp), 0600, written whole (a temporary file renamed
// over it) at each round's start and removed when the job ends. No file (the server restarted on another machine,
// or the directory was refused): the restarted server trusts the first claim, as before, and says so.
#pragma once

#include <optional>
#include <string>

#include "rendezvous/protocol.hpp"

namespace ddprun::rendezvous {

// The round as text (JSON), and back: what a file holds, and what a host elected in etcd keeps there (the next host
// takes the round back from it, agent/rendezvous_link_elected.cpp). decode: nullopt with `problem` naming `where`
// when the text is not a round of `run_id`.
std::string encode_remembered_round(const std::string& run_id, const RememberedRound& round);
std::optional<RememberedRound> decode_remembered_round(const std::string& text, const std::string& run_id,
                                                       const std::string& where, std::string& problem);

// "<dir>/rdzv-<16 hex digits of the run id's hash>-<port>.round".
std::string remembered_round_path(const std::string& dir, const std::string& run_id, int port);

// The round kept in `path` for `run_id`; nullopt when there is no such file. A file that cannot be read, is not
// one of ours or is of another run: nullopt with `problem` saying so (the server starts without it).
std::optional<RememberedRound> read_remembered_round(const std::string& path, const std::string& run_id,
                                                     std::string& problem);

// Writes it whole; false with `problem` set when it cannot (then no older round is left in its place).
bool write_remembered_round(const std::string& path, const std::string& run_id, const RememberedRound& round,
                            std::string& problem);

}  // namespace ddprun::rendezvous
