// PROGRAM [ARGS...] → what each worker executes, as torchrun decides it:
//   a .py file      → $PYTHON_EXEC (default python3) -u FILE ARGS   (unbuffered, so lines arrive at once)
//   --run-path FILE → the same, whatever FILE's name
//   -m MODULE       → $PYTHON_EXEC -u -m MODULE ARGS
//   anything else, or --no-python → PROGRAM ARGS, found through PATH like execvp
#pragma once

#include <string>
#include <vector>

#include "agent/agent_config.hpp"

namespace ddprun::launcher {

// `run_path` (torchrun's --run-path): PROGRAM is a Python file whatever its name; it wins over --no-python,
// as in torchrun.
// Fills cfg.program and cfg.argv. Throws ddprun::UsageError: 127 when the program (or Python, or the
// script) is not found, 126 when it is a directory or not executable, 64 for -m with --no-python or
// --run-path.
void resolve_worker_command(const std::vector<std::string>& command, bool module, bool no_python, bool run_path,
                            const std::vector<std::string>& env, agent::AgentConfig& cfg);

}  // namespace ddprun::launcher
