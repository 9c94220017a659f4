// Temporary run directories whose ddprun died with its job guard (both SIGKILLed: the OOM killer, a node's
// SIGKILL to the whole step) stay in $TMPDIR with nobody to remove them. Each run directory says who made it
// (a ".owner" file: this boot, the pid and the pid's start time), and every new run removes this user's run
// directories, in the base it uses, whose maker is gone (issue 34).
#pragma once

#include <string>

namespace ddprun::agent {

inline constexpr const char* kOwnerFileName = ".owner";

// Writes `dir`/.owner for this process. Best effort: without it the directory is never swept.
void mark_run_dir_owner(const std::string& dir);

// Removes the run directories in `base` ("ddprun-*_XXXXXX", a directory owned by this user, with an .owner
// file of this boot) whose maker is no longer running (no such pid, or a pid started at another time). A
// directory of another boot (a shared TMPDIR, or /tmp kept over a reboot), of another user, or without an
// owner file is left alone. Returns how many went.
int sweep_stale_run_dirs(const std::string& base);

}  // namespace ddprun::agent
