// The job's contract with its workers, in one place: every side includes this header (the agent that sets
// it up, the worker SDK and the embedded spawn that read it, the launcher, the tests) and the Python helper
// (python/ddprun_heartbeat.py) is checked against it (tests/integration/test_contract.py, through
// tests/bin/contract_dump). Header-only, no dependency but the C++ library. docs/ENVIRONMENT.md,
// "Hang detection" and "Exit codes" (common/exit_codes.hpp) say the same for users.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

extern "C" char** environ;  // as <unistd.h> declares it (with _GNU_SOURCE)

namespace ddprun::contract {

// torchrun's variables, the same names and meanings.
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr const char* kErrorFile = "TORCHELASTIC_ERROR_FILE";

// ddprun's additions.
inline constexpr const char* kAgentPid = "DDPRUN_AGENT_PID";
inline constexpr const char* kVersion = "DDPRUN_VERSION";
inline constexpr const char* kJobTag = "DDPRUN_JOB_TAG";    // the job guard's mark (common/process/job_guard.hpp)
inline constexpr const char* kJobTags = "DDPRUN_JOB_TAGS";  // enclosing jobs' tags, then this one's
inline constexpr const char* kConsoleTty = "DDPRUN_CONSOLE_TTY";
inline constexpr const char* kHeartbeatFd = "DDPRUN_HEARTBEAT_FD";          // every worker (the live view)
inline constexpr const char* kHeartbeatOffset = "DDPRUN_HEARTBEAT_OFFSET";  // the worker's slot, in bytes
inline constexpr const char* kStacksFile = "DDPRUN_STACKS_FILE";            // faulthandler writes here
inline constexpr const char* kStacksSignal = "DDPRUN_STACKS_SIGNAL";        // ... on this signal
// With the heartbeat: where the agent writes the next round's variables ("NAME=value" lines) for a worker that
// re-forms in place (the slot's +32/+40 below; docs/MULTINODE.md "Re-forming in place").
inline constexpr const char* kReformFile = "DDPRUN_REFORM_FILE";
// --hang-timeout, each only where the user set none (PyTorch's names; agent/flight_recorder.hpp): the NCCL
// Flight Recorder's FIFO and dump in the worker's private directory, the recorder on, the FIFO read every second.
inline constexpr const char* kNcclPipeFile = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE";   // + RANK + ".pipe"
inline constexpr const char* kNcclDumpFile = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";   // + RANK
inline constexpr const char* kFrDumpFile = "TORCH_FR_DUMP_TEMP_FILE";             // newer torch: wins over the above
inline constexpr const char* kNcclTraceBufferSize = "TORCH_NCCL_TRACE_BUFFER_SIZE";
inline constexpr const char* kFrBufferSize = "TORCH_FR_BUFFER_SIZE";              // newer torch's name for it
inline constexpr const char* kNcclDumpOnTimeout = "TORCH_NCCL_DUMP_ON_TIMEOUT";
// TORCH_NCCL_TRACE_BUFFER_SIZE's value when the user set none: torch's own default since 2.6, the size PyTorch's
// Flight Recorder tutorial recommends.
inline constexpr const char* kFlightRecorderEntries = "2000";
inline constexpr const char* kEmbedded = "DDPRUN_EMBEDDED";  // started by the SDK's embedded spawn
// Never in a worker's environment: the rendezvous secret stays with ddprun.
inline constexpr const char* kToken = "DDPRUN_TOKEN";

// The heartbeat channel: one shared page, a slot per local rank at kHeartbeatSlotBytes * LOCAL_RANK. In a
// slot, native-endian int64s: the step at +0 (-1: none given), CLOCK_MONOTONIC nanoseconds at +8 (0: never
// beat), the time written last; at +16 the end of a declared quiet phase (CLOCK_MONOTONIC ns, 0: none): until
// then the worker may be silent without being hung (an evaluation, a checkpoint save, a data set loading),
// written before the beat that opens the phase. At +24 the worker's own work so far (ns, 0: never said): the
// time it spent on its own computation rather than waiting for the other ranks, written before a beat. In a
// job whose ranks step in lockstep every rank's step takes as long as the slowest's; this is what tells the
// slow one (straggler naming, rendezvous/straggler_watch.hpp).
inline constexpr std::size_t kHeartbeatSlotBytes = 64;  // one cache line: workers never share a line
inline constexpr std::size_t kBeatStepOffset = 0;
inline constexpr std::size_t kBeatTimeOffset = 8;
inline constexpr std::size_t kBeatQuietUntilOffset = 16;
inline constexpr std::size_t kBeatWorkOffset = 24;
// Re-forming in place: an elastic re-form (a node joined or was lost, nothing failed) keeps the workers of the
// nodes that stay, which take the new round's ranks without a restart (no interpreter start, no import, no
// checkpoint). The worker offers it by writing 1 at +40; the agent, at each such re-form, writes the round's
// variables to DDPRUN_REFORM_FILE, then n at +32 (the in-place re-forms announced so far); the worker takes the
// round up (reads the file, rebuilds its process group) and writes n + 1 at +40. A worker whose +40 is 0, or
// behind, is restarted the usual way; one that does not take an announced round up in --term-timeout is killed
// as a failure.
inline constexpr std::size_t kBeatReformsAnnouncedOffset = 32;  // written by the agent
inline constexpr std::size_t kBeatReformsTakenOffset = 40;      // written by the worker: 0 none offered
// Written by the agent: n when the process group of the round before in-place re-form n lost a node. A lost node
// may be frozen (SIGSTOP, a hung kernel, a cut network) rather than dead: its peers' sockets stay open and a
// collective waiting on it never fails by itself, so the worker would never reach its next step boundary. A
// worker that offered re-forms leaves that group at once instead: the Python helper shuts the group's connections
// down, the collective fails as if the peer had died, and the worker takes the round up with its state intact.
inline constexpr std::size_t kBeatGroupLostOffset = 48;
// Written by the worker (the Python helper, when imported): 1 once it is past its imports and slow set-up and
// can meet its peers in a process group. A re-form that starts new workers on some nodes (a joiner) and keeps
// the others' in place hands the kept ones the round only when every new one said so (or beat): until then
// they train on, instead of waiting in the new group for an interpreter to start (rendezvous round_ready/meet).
inline constexpr std::size_t kBeatReadyToMeetOffset = 56;

// The error file (torchelastic's format; common/supervision/error_file.hpp reads it):
//   {"message": {"message": "<Type>: <text>", "extraInfo": {"py_callstack": "...", "timestamp": "<unix s>"}}}
inline constexpr const char* kErrorMessageKey = "message";
inline constexpr const char* kErrorExtraInfoKey = "extraInfo";
inline constexpr const char* kErrorCallstackKey = "py_callstack";
inline constexpr const char* kErrorTimestampKey = "timestamp";

// This process's environment as "NAME=value" entries (what env_value reads; main passes it on explicitly,
// so that parsing and the worker environment stay pure functions of their inputs).
inline std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

// The value of NAME in an environment given as "NAME=value" entries, or `fallback`.
inline std::string env_value(const std::vector<std::string>& env, std::string_view name,
                             const std::string& fallback = "") {
  for (const auto& e : env)
    if (e.size() > name.size() && e[name.size()] == '=' && std::string_view(e).substr(0, name.size()) == name)
      return e.substr(name.size() + 1);
  return fallback;
}

}  // namespace ddprun::contract
