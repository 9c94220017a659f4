// One constructor for each kind of event the agent writes to --events-file (agent/event_log.hpp writes them):
// the fields of a kind are decided here and nowhere else, and docs/events.schema.json declares them for the
// readers. tests/bin/contract_dump --events prints one event of every kind, and tests/integration/test_contract.py
// checks each against the schema and that no kind of the schema is missing (issue 31: events were built at ~20
// sites with no declared shape). Each takes its time explicitly (Unix ms), so a sample is reproducible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/supervision_policy.hpp"
#include "agent/world.hpp"
#include "rendezvous/protocol.hpp"

namespace ddprun::agent::event {
using nlohmann::json;

// The round the rendezvous placed this node in; a separate server lost or back.
json rendezvous(std::int64_t time_ms, const rendezvous::Assignment& a);
json rendezvous_lost(std::int64_t time_ms, const std::string& why);
json rendezvous_resumed(std::int64_t time_ms, const std::string& server);
// A worker started, exited, or failed by its error file before its exit.
json started(std::int64_t time_ms, int rank, int local_rank, pid_t pid, int node_rank);
json exited(const WorkerRecord& w, int node_rank);  // its time is the worker's end
json raised(const WorkerRecord& w, int node_rank);
// What ddprun was sent, Ctrl-Z and fg, and the teardown it began.
json signal(std::int64_t time_ms, int signal, pid_t sender_pid);
json suspended(std::int64_t time_ms);
json resumed(std::int64_t time_ms);
json teardown(std::int64_t time_ms, const std::string& reason, int signal);
// Re-forms: the round re-formed (in place or not), in place taken up or not, this node dropped to rejoin.
json restarting(std::int64_t time_ms, const std::string& cause, const std::string& reason, bool membership,
                bool in_place);
json reformed_in_place(std::int64_t time_ms, const World& w, int reforms);
json reform_not_taken(std::int64_t time_ms, int restart_count);
json dropped(std::int64_t time_ms, const std::string& reason);
// The hang inquiry: a rank silent, the stacks captured (with the NCCL dumps written, if any were asked), a
// verdict deferred by a declared quiet phase.
json hung(std::int64_t time_ms, const WorkerRecord& w, int node_rank, std::int64_t last_step,
          std::int64_t last_beat_ms, bool never_beat);
struct StackDumpFile {
  int rank = 0;
  std::string file;
};
json stacks(std::int64_t time_ms, const std::string& file, const std::vector<StackDumpFile>* nccl_dumps);
// An inquiry without a verdict: quiet ranks (wait_ms), or `recovered` ones (found hung, beat during the capture).
json hang_deferred(std::int64_t time_ms, const std::vector<int>& quiet_ranks, std::int64_t wait_ms,
                   const std::vector<int>& recovered);
// The rendezvous named a straggler, or stopped naming it.
json straggler(std::int64_t time_ms, const rendezvous::Straggler& s, double window_s);
json straggler_end(std::int64_t time_ms, int rank, int node_rank);
// Output: a log file that could not be written, a console given up at the end.
json log_write_failed(std::int64_t time_ms, int rank, const std::string& path, int error, std::int64_t bytes_written,
                      bool created);
json console_abandoned(std::int64_t time_ms, std::int64_t lost_bytes);
// The last line, `summary`, is exit_summary.hpp's summary_json.

}  // namespace ddprun::agent::event
