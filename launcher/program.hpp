// PROGRAM [ARGS...] → what each worker executes, as torchrun decides it, except that programs are executed:
//   a .py file      → $PYTHON_EXEC (default python3) -u FILE ARGS   (unbuffered, so lines arrive at once)
//   any other file that is not an executable ELF binary or '#!' script (a name relative to the working
//                     directory too, as torchrun reads it) → the same
//   --run-path FILE → the same, whatever FILE is
//   -m MODULE       → $PYTHON_EXEC -u -m MODULE ARGS
//   an executable ELF binary or '#!' script, a name that is no file (found through PATH like execvp), or
//   anything with --no-python → PROGRAM ARGS
#pragma once

#include <string>
#include <vector>

#include "agent/agent_config.hpp"

namespace ddprun::launcher {

// `run_path` (torchrun's --run-path): PROGRAM is a Python file whatever its name; it wins over --no-python,
// as in torchrun.
// Fills cfg.program and cfg.argv; `notes` gets a debug line when a file without .py goes to Python. Throws
// ddprun::UsageError: 127 when the program (or Python, or the script) is not found, 126 when it is a directory
// or not executable, 64 for -m with --no-python or --run-path.
void resolve_worker_command(const std::vector<std::string>& command, bool module, bool no_python, bool run_path,
                            const std::vector<std::string>& env, agent::AgentConfig& cfg,
                            std::vector<std::string>& notes);

// The directory of the Python helpers that come with this ddprun (python/ddprun_heartbeat.py, installed
// under <prefix>/share/ddprun/python and copied to build/share/ddprun/python), found beside the running
// executable `executable` at the path CMake compiled in (DDPRUN_PYTHON_HELPER_DIR, relative to bin/), so that
// a moved prefix still finds it; "" when ddprun_heartbeat.py is not there.
std::string python_helper_dir(const std::string& executable);

// `env` with `dir` added at the end of PYTHONPATH (PYTHONPATH=dir when unset or empty), so that a Python
// worker imports ddprun_heartbeat with no set-up while the user's own PYTHONPATH entries, and the script's
// directory, still come first. Unchanged when `dir` is empty or already listed.
std::vector<std::string> with_python_path(std::vector<std::string> env, const std::string& dir);

}  // namespace ddprun::launcher
