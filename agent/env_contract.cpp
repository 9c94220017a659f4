#include "agent/env_contract.hpp"

#include <map>

#include "common/version.hpp"

namespace ddprun::agent {
namespace c = ddprun::contract;

namespace {

// SLURM's notation for tasks per node, by node: "2(x3),1".
std::string tasks_per_node(const World& w) {
  std::vector<int> nprocs = w.nprocs;
  if (nprocs.empty()) nprocs.assign(static_cast<std::size_t>(w.nnodes), w.local_world_size);
  std::string out;
  for (std::size_t i = 0; i < nprocs.size();) {
    std::size_t same = 1;
    while (i + same < nprocs.size() && nprocs[i + same] == nprocs[i]) ++same;
    if (!out.empty()) out += ",";
    out += std::to_string(nprocs[i]);
    if (same > 1) out += "(x" + std::to_string(same) + ")";
    i += same;
  }
  return out;
}

// ddprun is one of SLURM's tasks (srun starts one per node; the batch script is one too), and its workers
// inherit that task's view: SLURM_PROCID = the node index, the same for every worker of a node. Code that takes
// its rank from SLURM (PyTorch Lightning's SLURMEnvironment, submitit, many scripts) would then give several
// workers one rank. Each worker is the job's task here: SLURM's variables say what RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE and GROUP_RANK say, in this round (an elastic round changes them). Outside SLURM (no
// SLURM_PROCID) nothing is added.
void set_slurm_task_view(std::map<std::string, std::string>& vars, const World& w, int rank, int local_rank) {
  if (vars.find("SLURM_PROCID") == vars.end()) return;
  const auto set_if_present = [&](const char* k, const std::string& v) {
    if (auto it = vars.find(k); it != vars.end()) it->second = v;
  };
  vars["SLURM_PROCID"] = std::to_string(rank);
  vars["SLURM_LOCALID"] = std::to_string(local_rank);
  vars["SLURM_NTASKS"] = std::to_string(w.world_size);
  vars["SLURM_NTASKS_PER_NODE"] = std::to_string(w.local_world_size);
  set_if_present("SLURM_NPROCS", std::to_string(w.world_size));  // SLURM_NTASKS' old name
  set_if_present("SLURM_NODEID", std::to_string(w.node_rank));
  set_if_present("SLURM_STEP_NUM_TASKS", std::to_string(w.world_size));
  set_if_present("SLURM_STEP_TASKS_PER_NODE", tasks_per_node(w));
  std::string gtids;  // the global task ids on this node
  for (int i = 0; i < w.local_world_size; ++i) gtids += (i ? "," : "") + std::to_string(w.rank_offset + i);
  set_if_present("SLURM_GTIDS", gtids);
}

}  // namespace

std::vector<std::string> round_variables(const World& w, int local_rank) {
  const std::string rank = std::to_string(w.rank_offset + local_rank);
  const auto var = [](const char* name, const std::string& value) { return std::string(name) + "=" + value; };
  // One role per job, so a worker's rank within its role is its global rank.
  return {var(c::kRank, rank),
          var(c::kWorldSize, std::to_string(w.world_size)),
          var(c::kGroupRank, std::to_string(w.node_rank)),
          var(c::kGroupWorldSize, std::to_string(w.nnodes)),
          var(c::kRoleRank, rank),
          var(c::kRoleWorldSize, std::to_string(w.world_size)),
          var(c::kMasterAddr, w.master_addr),
          var(c::kMasterPort, std::to_string(w.master_port)),
          var(c::kRestartCount, std::to_string(w.restart_count)),
          var(c::kMaxRestarts, std::to_string(w.max_restarts)),
          var(c::kRunId, w.run_id)};
}

std::vector<std::string> worker_environment(const std::vector<std::string>& base, const World& w,
                                            const WorkerEnvInputs& in) {
  const int rank = w.rank_offset + in.local_rank;
  // Ordered map: the child's environment comes out sorted and without duplicates, whatever `base` held.
  std::map<std::string, std::string> vars;
  for (const auto& e : base) {
    auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    vars.emplace(e.substr(0, eq), e.substr(eq + 1));  // first definition wins, as getenv does
  }
  auto set = [&](const std::string& k, const std::string& v) { vars[k] = v; };
  auto set_default = [&](const std::string& k, const std::string& v) { vars.emplace(k, v); };

  for (const auto& e : round_variables(w, in.local_rank)) {
    const auto eq = e.find('=');
    set(e.substr(0, eq), e.substr(eq + 1));
  }
  set(c::kLocalRank, std::to_string(in.local_rank));
  set(c::kLocalWorldSize, std::to_string(w.local_world_size));
  set(c::kRoleName, w.role);
  set(c::kUseAgentStore, "False");
  set(c::kErrorFile, in.error_file);
  // Several workers each using every core oversubscribe the node badly; torchrun sets 1 for the same reason.
  if (w.local_world_size > 1) set_default("OMP_NUM_THREADS", "1");
  // torch 1.x reads NCCL_ASYNC_ERROR_HANDLING, 2.x TORCH_NCCL_ASYNC_ERROR_HANDLING (the old name still works,
  // with a deprecation warning, but the new one wins). Both are set so that either torch sees the same
  // choice: a value the user gave under one name is copied to the other, else both are 1.
  const auto given = [&](const char* k) {
    const auto it = vars.find(k);
    return it == vars.end() ? nullptr : &it->second;
  };
  const std::string* torch2 = given("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  const std::string* torch1 = given("NCCL_ASYNC_ERROR_HANDLING");
  const std::string nccl_handling = torch2 ? *torch2 : torch1 ? *torch1 : "1";
  set_default("TORCH_NCCL_ASYNC_ERROR_HANDLING", nccl_handling);
  set_default("NCCL_ASYNC_ERROR_HANDLING", nccl_handling);
  set(c::kAgentPid, std::to_string(in.agent_pid));
  set(c::kVersion, kVersion);
  if (!in.job_tag.empty()) {
    // The list carries every enclosing job's tag too (a ddprun run by a worker of another): the outer
    // job's guard then finds the inner job's processes (common/process/job_guard.hpp).
    const std::string* outer = given(c::kJobTags);
    if (!outer) outer = given(c::kJobTag);
    set(c::kJobTags, outer && !outer->empty() ? *outer + "," + in.job_tag : in.job_tag);
    set(c::kJobTag, in.job_tag);
  }
  // Set or removed, never inherited: a nested ddprun's console is its parent's pipe, not a terminal.
  if (in.console_tty) set(c::kConsoleTty, "1");
  else vars.erase(c::kConsoleTty);
  // Set or removed, never inherited from an enclosing ddprun (a nested job): its descriptor and files mean
  // nothing here. The stacks only where a hang can be judged (--hang-timeout).
  for (const char* k : {c::kHeartbeatFd, c::kHeartbeatOffset, c::kStacksFile, c::kStacksSignal, c::kReformFile})
    vars.erase(k);
  if (in.heartbeat_fd >= 0) {
    set(c::kHeartbeatFd, std::to_string(in.heartbeat_fd));
    set(c::kHeartbeatOffset, std::to_string(in.heartbeat_offset));
    if (!in.reform_file.empty()) set(c::kReformFile, in.reform_file);
  }
  if (!in.stacks_file.empty()) {
    set(c::kStacksFile, in.stacks_file);
    set(c::kStacksSignal, std::to_string(in.stacks_signal));
    if (!in.flight_recorder_prefix.empty()) {
      // Dumps land beside the Python stacks, where the capture looks and --log-dir gets them; the recorder is on
      // (torch < 2.6 had it off: no recorder, no FIFO) and its FIFO read every second rather than every 8 minutes
      // (torch < 2.6 read it that rarely without TORCH_NCCL_DUMP_ON_TIMEOUT). README "Hang detection".
      set_default(c::kNcclPipeFile, in.flight_recorder_prefix);
      if (!given(c::kFrDumpFile)) set_default(c::kNcclDumpFile, in.flight_recorder_prefix);
      if (!given(c::kFrBufferSize)) set_default(c::kNcclTraceBufferSize, c::kFlightRecorderEntries);
      set_default(c::kNcclDumpOnTimeout, "1");
    }
  }
  set_slurm_task_view(vars, w, rank, in.local_rank);
  // The job's rendezvous secret stays with ddprun: whatever a worker runs (and logs) never sees it.
  vars.erase(c::kToken);

  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

}  // namespace ddprun::agent
