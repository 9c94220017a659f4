// ddprun's exit codes, the one place they are defined (README "Exit codes"); header-only, so every side
// (launcher, agent, rendezvous server, tests) includes it without pulling anything else in. A job that ran
// exits with its root cause's code instead: the failing worker's exit code, or 128+N when it died by
// signal N (or ddprun itself was stopped by N).
#pragma once

namespace ddprun {

inline constexpr int kExitUsage = 64;        // EX_USAGE: bad option, value or combination
inline constexpr int kExitNoInput = 66;      // EX_NOINPUT: --rdzv-token-file cannot be read
inline constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: a port asked for (--master-port, the rendezvous
                                             // port node 0 hosts) is in use
inline constexpr int kExitSoftware = 70;     // EX_SOFTWARE: internal error (a bug in ddprun)
inline constexpr int kExitOsError = 71;      // EX_OSERR: the system refused (fork, pipes, subreaper), or a
                                             // resource ran out (open files, processes): named with what to do
inline constexpr int kExitCantCreate = 73;   // EX_CANTCREAT: log directory or events file cannot be written
// The rendezvous (agent/rendezvous_link.cpp maps the client's errors to them):
inline constexpr int kExitRdzvUnavailable = kExitUnavailable;  // 69: the rendezvous port to host cannot be bound
inline constexpr int kExitRdzvLost = 74;      // lost the rendezvous server (connection closed, silent)
inline constexpr int kExitRdzvTimeout = 75;   // not every node joined in time, or the server was never reached
inline constexpr int kExitRdzvProtocol = 76;  // the server broke the protocol
// 77: refused: wrong token or run id, duplicate or out-of-range node rank; or etcd refused the request (auth)
inline constexpr int kExitRdzvRefused = 77;
// Preempted and stopped cleanly (agent/supervision_policy.hpp decides it): a notice (SIGUSR1/SIGUSR2) or
// SIGTERM reached ddprun and every worker then exited 0. A batch script requeues on it (examples/slurm/).
inline constexpr int kExitPreempted = 79;
// The root cause hung: it stopped beating for --hang-timeout, its stacks were saved and ddprun killed it. Not
// 128+SIGKILL, so that a batch script tells a hang from an OOM kill (137).
inline constexpr int kExitHung = 78;
inline constexpr int kExitNotExecutable = 126;
inline constexpr int kExitNotFound = 127;

}  // namespace ddprun
