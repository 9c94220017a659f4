// The command line: `ddprun [options] PROGRAM [ARGS...]` → a validated agent configuration.
//
// Validation is complete before anything is started: every problem is a ddprun::UsageError carrying one
// line for the user and the exit code of launcher/exit_codes.hpp, and no worker, file or directory has
// been created when it is thrown.
#pragma once

#include <string>
#include <vector>

#include "agent/agent_config.hpp"

namespace ddprun::launcher {

struct CommandLine {
  bool exit_now = false;     // --help / --version: print `text` to stdout and exit 0
  std::string text;
  agent::AgentConfig agent;  // valid when !exit_now
  std::vector<std::string> notes;  // lines to log (e.g. nproc fallback); "warning: ..."/"debug: ..." at that level
};

// The launcher a command line replaces. ddprun is torchrun (`python -m torch.distributed.run`): no worker gets
// --local_rank=N. Started under the name ddprun-launch (a link to ddprun, installed beside it) it is
// `python -m torch.distributed.launch`: each worker gets --local_rank=N unless --use-env says not to. The line
// itself cannot say which one it was written for (the same words follow either), nor can a guess from the
// script's text (a parser in another file, a sub-parser, a parent parser: issue 54), so the user's choice of
// name decides (docs/TORCHRUN.md "torch.distributed.launch").
enum class LineStyle { kTorchrun, kLaunch };

// kLaunch for a program path whose last component is "ddprun-launch", else kTorchrun.
LineStyle line_style_of(const std::string& argv0);

// `env` is the launcher's environment ("NAME=value"), consulted for PATH, PYTHON_EXEC, DDPRUN_LOG_LEVEL,
// CUDA_VISIBLE_DEVICES, SLURM_* and torchrun's PET_* (docs/TORCHRUN.md). Throws ddprun::UsageError.
CommandLine parse_command_line(const std::vector<std::string>& args, const std::vector<std::string>& env,
                               LineStyle style = LineStyle::kTorchrun);

}  // namespace ddprun::launcher
