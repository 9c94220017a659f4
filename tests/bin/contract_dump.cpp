// Prints the job's contract (common/contract/worker_contract.hpp) as JSON, so that tests in other languages
// (tests/integration/test_contract.py: the Python helper, the real worker environment) check against the
// one definition instead of a copy. `contract_dump --events` prints one event of every kind the agent writes,
// each from its constructor (agent/event_kinds.hpp), one per line: test_contract.py checks them against
// docs/events.schema.json.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "agent/event_kinds.hpp"
#include "agent/exit_summary.hpp"
#include "common/contract/worker_contract.hpp"

namespace c = ddprun::contract;

namespace {
namespace ev = ddprun::agent::event;
using ddprun::agent::WorkerRecord;

void print_events() {
  constexpr std::int64_t t = 1'700'000'000'000;
  ddprun::agent::SupervisionPolicy policy;
  policy.add_worker(2, 0, 4241, t);
  policy.add_worker(3, 1, 4242, t);
  ddprun::process::ExitStatus failed;
  failed.code = 2;
  policy.on_exit(1, failed, t + 1);
  WorkerRecord& w = policy.worker(1);
  w.error_message = "ValueError: bad batch";
  ddprun::rendezvous::Assignment a;
  a.node_rank = 1;
  a.nnodes = 2;
  a.rank_offset = 2;
  a.world_size = 4;
  a.nprocs = {2, 2};
  a.master_addr = "10.0.0.1";
  a.master_port = 29500;
  ddprun::agent::World world;
  world.node_rank = 1;
  world.world_size = 4;
  ddprun::rendezvous::Straggler s;
  s.rank = 3;
  s.node_rank = 1;
  s.host = "n1";
  s.pace_us = 30'000;
  s.median_us = 10'000;
  const std::vector<ev::StackDumpFile> dumps{{3, "/logs/nccl_trace_rank_3"}};
  ddprun::agent::SummaryContext ctx;
  ctx.host = "n1";
  ctx.end_ms = t + 9;
  const nlohmann::json all[] = {
      ev::rendezvous(t, a), ev::rendezvous_lost(t, "connection reset"), ev::rendezvous_resumed(t, "10.0.0.1:29400"),
      ev::started(t, 3, 1, 4242, 1), ev::exited(w, 1), ev::raised(w, 1), ev::signal(t, SIGTERM, 77),
      ev::suspended(t), ev::resumed(t), ev::teardown(t, "worker_failed", SIGTERM),
      ev::restarting(t, "rank 3 failed", "restart 1 of 3", false, true), ev::reformed_in_place(t, world, 1),
      ev::reform_not_taken(t, 1), ev::dropped(t, "missed heartbeats"), ev::hung(t, w, 1, 41, t - 9000, false),
      ev::stacks(t, "/logs/stacks.txt", &dumps), ev::hang_deferred(t, {0, 1}, 20'000, {}), ev::straggler(t, s, 30.0),
      ev::straggler_end(t, 3, 1), ev::log_write_failed(t, 3, "/logs/rank3.log", ENOSPC, 1 << 20, true),
      ev::console_abandoned(t, 512), ddprun::agent::summary_json(policy, ctx)};
  for (const nlohmann::json& e : all) std::printf("%s\n", e.dump().c_str());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--events") == 0) {
    print_events();
    return 0;
  }
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
