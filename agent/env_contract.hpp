// The environment every worker gets (docs/ENVIRONMENT.md): torchrun's variables, plus ddprun's
// own DDPRUN_* additions, named in common/contract/worker_contract.hpp. Pure: computes a new environment
// from the agent's and the world assignment.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "agent/world.hpp"
#include "common/contract/worker_contract.hpp"

namespace ddprun::agent {

struct WorkerEnvInputs {
  int local_rank = 0;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE
  int agent_pid = 0;       // DDPRUN_AGENT_PID
  std::string job_tag;     // DDPRUN_JOB_TAG: how the job guard finds the job's processes ("" = no guard)
  // DDPRUN_CONSOLE_TTY=1: the worker's stdout (a pipe) is forwarded to ddprun's terminal, so the worker may
  // draw a progress bar redrawn with '\r' (the line framer passes such pieces through with their prefix).
  bool console_tty = false;
  // The heartbeat slot (agent/heartbeat_channel.hpp): DDPRUN_HEARTBEAT_FD/_OFFSET; -1: neither is set
  int heartbeat_fd = -1;
  std::size_t heartbeat_offset = 0;
  std::string reform_file{};  // with the heartbeat: DDPRUN_REFORM_FILE
  // --hang-timeout only: DDPRUN_STACKS_FILE/_SIGNAL; "": neither is set
  std::string stacks_file{};
  int stacks_signal = 0;
  // With the heartbeat: the NCCL Flight Recorder's FIFO and dump prefix in the worker's private directory
  // (agent/flight_recorder.hpp); "" sets none of its variables.
  std::string flight_recorder_prefix{};
};

// `base` is the agent's own environment ("NAME=value"); variables of the contract replace entries of the
// same name, OMP_NUM_THREADS, TORCH_NCCL_ASYNC_ERROR_HANDLING and NCCL_ASYNC_ERROR_HANDLING (torch 1.x's name)
// are only added when not already set (a value given under one NCCL name is copied to the other), and so are
// the Flight Recorder's (TORCH_NCCL_DEBUG_INFO_PIPE_FILE, _TEMP_FILE, TORCH_NCCL_TRACE_BUFFER_SIZE,
// TORCH_NCCL_DUMP_ON_TIMEOUT; each also when torch's newer name for it is not set).
// DDPRUN_TOKEN is removed: the rendezvous secret is ddprun's, and a worker has no use for it.
std::vector<std::string> worker_environment(const std::vector<std::string>& base, const World& world,
                                            const WorkerEnvInputs& inputs);

// The variables a round changes, for a worker that re-forms in place (DDPRUN_REFORM_FILE): torchrun's ranks,
// sizes, master, restart count and run id, as worker_environment sets them. LOCAL_RANK, LOCAL_WORLD_SIZE and the
// worker's files stay what they were (a node re-forms in place only with the same workers).
std::vector<std::string> round_variables(const World& world, int local_rank);

using contract::current_environment;
using contract::env_value;

}  // namespace ddprun::agent
