// ddprun-status's rendering: one job's document (agent/live_view.cpp LiveView::document) as one
// screen, like squeue or nvidia-smi: a header line for the job, a line per node, a line per rank. Values a
// job does not have (no beats without --hang-timeout or a heartbeat helper) are blank, never made up.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace ddprun::launcher {

std::string render_job(const nlohmann::json& job, std::int64_t now_ms);

// "1.5G", "512M", "20K"; "" for null.
std::string human_bytes(const nlohmann::json& bytes);
// "00:12:31", "3d 04:05:06"
std::string human_age(std::int64_t ms);

}  // namespace ddprun::launcher
