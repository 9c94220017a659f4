// The launcher's names for ddprun's exit codes: common/exit_codes.hpp defines them all (README "Exit codes").
#pragma once

#include "common/exit_codes.hpp"

namespace ddprun::launcher {
using ddprun::kExitCantCreate;
using ddprun::kExitHung;
using ddprun::kExitNoInput;
using ddprun::kExitNotExecutable;
using ddprun::kExitNotFound;
using ddprun::kExitOsError;
using ddprun::kExitPreempted;
using ddprun::kExitRdzvLost;
using ddprun::kExitRdzvProtocol;
using ddprun::kExitRdzvRefused;
using ddprun::kExitRdzvTimeout;
using ddprun::kExitSoftware;
using ddprun::kExitUnavailable;
using ddprun::kExitUsage;
}  // namespace ddprun::launcher
