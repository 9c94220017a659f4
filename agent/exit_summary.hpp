// The account of a finished job: every worker's fate and the root cause, as text for people (one block on
// stderr) and as JSON for tools (the events file's "summary" line).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "agent/supervision_policy.hpp"

namespace ddprun::agent {

struct SummaryContext {
  std::string host;
  int node_rank = 0;
  std::int64_t start_ms = 0;
  std::int64_t end_ms = 0;
  std::string log_root;  // kept log directory, empty if none
};

nlohmann::json worker_json(const WorkerRecord& w);
nlohmann::json summary_json(const SupervisionPolicy& policy, const SummaryContext& ctx);
// Multi-line block, each line starting with "ddprun: ", ending with a newline.
std::string summary_text(const SupervisionPolicy& policy, const SummaryContext& ctx);
// "2026-11-21T05:50:01.123Z"
std::string iso_time(std::int64_t unix_ms);

}  // namespace ddprun::agent
