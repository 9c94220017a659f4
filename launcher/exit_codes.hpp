// ddprun's own exit codes (README "Exit codes"). A job that ran exits with its root cause's code instead:
// the failing worker's exit code, or 128+N when it died by signal N (or ddprun itself was stopped by N).
#pragma once

#include "agent/rendezvous_link.hpp"
#include "agent/supervision_policy.hpp"

namespace ddprun::launcher {

inline constexpr int kExitUsage = 64;        // EX_USAGE: bad option, value or combination
inline constexpr int kExitNoInput = 66;      // EX_NOINPUT: --rdzv-token-file cannot be read
inline constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: a port asked for (--master-port, the rendezvous
                                             // port node 0 hosts) is in use
inline constexpr int kExitSoftware = 70;     // EX_SOFTWARE: internal error (a bug in ddprun)
inline constexpr int kExitOsError = 71;      // EX_OSERR: the system refused (fork, pipes, subreaper)
inline constexpr int kExitCantCreate = 73;   // EX_CANTCREAT: log directory or events file cannot be written
// The rendezvous (agent/rendezvous_link.hpp decides them; listed here so that every code is in one place):
inline constexpr int kExitRdzvLost = agent::kExitRdzvLost;          // 74: lost the rendezvous server
inline constexpr int kExitRdzvTimeout = agent::kExitRdzvTimeout;    // 75: not every node joined in time,
                                                                    //     or the server was never reached
inline constexpr int kExitRdzvProtocol = agent::kExitRdzvProtocol;  // 76: the server broke the protocol
inline constexpr int kExitRdzvRefused = agent::kExitRdzvRefused;    // 77: refused: wrong token or run id,
                                                                    //     duplicate or out-of-range node rank
static_assert(agent::kExitRdzvUnavailable == kExitUnavailable);
// Preempted and stopped cleanly (agent/supervision_policy.hpp decides it): a notice (SIGUSR1/SIGUSR2) or SIGTERM
// reached ddprun and every worker then exited 0. A batch script requeues on it (examples/slurm/).
inline constexpr int kExitPreempted = agent::kExitPreempted;  // 79
inline constexpr int kExitNotExecutable = 126;
inline constexpr int kExitNotFound = 127;

}  // namespace ddprun::launcher
