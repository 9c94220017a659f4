#include "launcher/slurm.hpp"

#include "agent/env_contract.hpp"
#include "launcher/option_values.hpp"

namespace ddprun::launcher {

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets.
  std::string entry;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    entry.push_back(c);
  }
  const auto open = entry.find('[');
  if (open == std::string::npos) return entry;
  const auto close = entry.find(']', open);
  if (close == std::string::npos) return "";
  const std::string inside = entry.substr(open + 1, close - open - 1);
  const std::string first = inside.substr(0, inside.find_first_of(",-"));  // keeps zero padding: "07"
  if (first.empty()) return "";
  return entry.substr(0, open) + first + entry.substr(close + 1);
}

bool apply_slurm_topology(TopologyOptions& o, bool nnodes_given, bool rdzv_port_given,
                          const std::vector<std::string>& env, std::vector<std::string>& notes) {
  const std::string nnodes = agent::env_value(env, "SLURM_NNODES", "");
  const std::string node_id = agent::env_value(env, "SLURM_NODEID", "");
  const std::string nodelist = agent::env_value(env, "SLURM_JOB_NODELIST", "");
  const std::string job_id = agent::env_value(env, "SLURM_JOB_ID", "");
  int n = 0, id = 0, job = 0;
  if (!parse_int_strict(nnodes, n) || n < 2 || !parse_int_strict(node_id, id) || nodelist.empty() ||
      !parse_int_strict(job_id, job) || job < 0)
    return false;
  if (nnodes_given || o.node_rank_given || !o.master_addr.empty() || !o.rdzv_endpoint.empty() || o.standalone)
    return false;
  const std::string host0 = first_slurm_host(nodelist);
  if (host0.empty() || !valid_host(host0)) return false;
  o.nnodes = nnodes;
  o.node_rank = node_id;
  o.node_rank_given = true;
  o.master_addr = host0;
  if (o.run_id == "none" && o.rdzv_id.empty()) o.run_id = "slurm-" + job_id;
  if (!rdzv_port_given) o.rdzv_port = std::to_string(29400 + job % 1000);
  notes.push_back("SLURM job " + job_id + ": node " + node_id + " of " + nnodes + ", rendezvous at " + host0 + ":" +
                  o.rdzv_port);
  return true;
}

}  // namespace ddprun::launcher
