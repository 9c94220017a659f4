// PROGRAM [ARGS...] → what each worker executes, as torchrun decides it:
//   a .py file      → $PYTHON_EXEC (default python3) -u FILE ARGS   (unbuffered, so lines arrive at once)
//   -m MODULE       → $PYTHON_EXEC -u -m MODULE ARGS
//   anything else, or --no-python → PROGRAM ARGS, found through PATH like execvp
#pragma once

#include <string>
#include <vector>

#include "agent/agent_config.hpp"

namespace ddprun::launcher {

// Fills cfg.program and cfg.argv. Throws ddprun::UsageError: 127 when the program (or Python, or the
// script) is not found, 126 when it is a directory or not executable, 64 for -m with --no-python.
void resolve_worker_command(const std::vector<std::string>& command, bool module, bool no_python,
                            const std::vector<std::string>& env, agent::AgentConfig& cfg);

}  // namespace ddprun::launcher
