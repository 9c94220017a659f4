// Prints the job's contract (common/contract/worker_contract.hpp) as JSON, so that tests in other languages
// (tests/integration/test_contract.py: the Python helper, the real worker environment) check against the
// one definition instead of a copy.
#include <cstdio>
#include <string>

#include "common/contract/worker_contract.hpp"

namespace c = ddprun::contract;

int main() {
  const char* env_names[] = {c::kRank, c::kLocalRank, c::kWorldSize, c::kLocalWorldSize, c::kGroupRank,
                             c::kGroupWorldSize, c::kRoleRank, c::kRoleName, c::kRoleWorldSize, c::kMasterAddr,
                             c::kMasterPort, c::kRestartCount, c::kMaxRestarts, c::kRunId, c::kUseAgentStore,
                             c::kErrorFile, c::kAgentPid, c::kVersion, c::kJobTag, c::kJobTags, c::kConsoleTty,
                             c::kHeartbeatFd, c::kHeartbeatOffset, c::kStacksFile, c::kStacksSignal,
                             c::kNcclPipeFile, c::kNcclDumpFile, c::kNcclTraceBufferSize, c::kNcclDumpOnTimeout,
                             c::kReformFile};
  std::string out = "{\"worker_env\": [";
  for (std::size_t i = 0; i < sizeof env_names / sizeof env_names[0]; ++i)
    out += std::string(i ? ", " : "") + "\"" + env_names[i] + "\"";
  out += "], \"never_in_worker_env\": [\"" + std::string(c::kToken) + "\"], \"embedded_only\": [\"" + c::kEmbedded +
         "\"], \"heartbeat\": {\"slot_bytes\": " + std::to_string(c::kHeartbeatSlotBytes) +
         ", \"step_offset\": " + std::to_string(c::kBeatStepOffset) + ", \"time_offset\": " +
         std::to_string(c::kBeatTimeOffset) + ", \"quiet_until_offset\": " + std::to_string(c::kBeatQuietUntilOffset) +
         ", \"work_offset\": " + std::to_string(c::kBeatWorkOffset) + ", \"reforms_announced_offset\": " +
         std::to_string(c::kBeatReformsAnnouncedOffset) + ", \"reforms_taken_offset\": " +
         std::to_string(c::kBeatReformsTakenOffset) + ", \"group_lost_offset\": " +
         std::to_string(c::kBeatGroupLostOffset) + "}, \"error_file\": {\"message\": \"" + c::kErrorMessageKey +
         "\", \"extra_info\": \"" + c::kErrorExtraInfoKey + "\", \"callstack\": \"" + c::kErrorCallstackKey +
         "\", \"timestamp\": \"" + c::kErrorTimestampKey + "\"}, \"flight_recorder\": {\"pipe_file\": \"" +
         c::kNcclPipeFile + "\", \"dump_file\": \"" + c::kNcclDumpFile + "\", \"newer_dump_file\": \"" + c::kFrDumpFile +
         "\", \"buffer_size\": \"" + c::kNcclTraceBufferSize + "\", \"newer_buffer_size\": \"" + c::kFrBufferSize +
         "\", \"dump_on_timeout\": \"" + c::kNcclDumpOnTimeout + "\", \"entries\": \"" + c::kFlightRecorderEntries +
         "\"}}\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}
