// The agent's names for the one supervision policy (common/supervision/supervision_policy.hpp), which the
// worker SDK's embedded spawn applies too.
#pragma once

#include "common/supervision/supervision_policy.hpp"

namespace ddprun::agent {
using supervision::Decision;
using supervision::is_stop_of_a_node;
using supervision::is_stop_signal;
using supervision::JobCause;
using supervision::Phase;
using supervision::SupervisionPolicy;
using supervision::to_string;
using supervision::WorkerRecord;
using supervision::WorkerState;
}  // namespace ddprun::agent
