// ddprun's own exit codes (README "Exit codes"). A job that ran exits with its root cause's code instead:
// the failing worker's exit code, or 128+N when it died by signal N (or ddprun itself was stopped by N).
#pragma once

namespace ddprun::launcher {

inline constexpr int kExitUsage = 64;        // EX_USAGE: bad option, value or combination
inline constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: a port asked for is in use
inline constexpr int kExitSoftware = 70;     // EX_SOFTWARE: internal error (a bug in ddprun)
inline constexpr int kExitOsError = 71;      // EX_OSERR: the system refused (fork, pipes, subreaper)
inline constexpr int kExitCantCreate = 73;   // EX_CANTCREAT: log directory or events file cannot be written
inline constexpr int kExitNotExecutable = 126;
inline constexpr int kExitNotFound = 127;

}  // namespace ddprun::launcher
