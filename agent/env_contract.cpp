#include "agent/env_contract.hpp"

#include <map>

#include "common/version.hpp"

extern char** environ;

namespace ddprun::agent {

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) env.emplace_back(*e);
  return env;
}

std::string env_value(const std::vector<std::string>& env, const std::string& name, const std::string& fallback) {
  const std::string prefix = name + "=";
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) return e.substr(prefix.size());
  return fallback;
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

  set("RANK", std::to_string(rank));
  set("LOCAL_RANK", std::to_string(in.local_rank));
  set("WORLD_SIZE", std::to_string(w.world_size));
  set("LOCAL_WORLD_SIZE", std::to_string(w.local_world_size));
  set("GROUP_RANK", std::to_string(w.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(w.nnodes));
  // One role per job, so a worker's rank within its role is its global rank.
  set("ROLE_RANK", std::to_string(rank));
  set("ROLE_NAME", w.role);
  set("ROLE_WORLD_SIZE", std::to_string(w.world_size));
  set("MASTER_ADDR", w.master_addr);
  set("MASTER_PORT", std::to_string(w.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(w.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(w.max_restarts));
  set("TORCHELASTIC_RUN_ID", w.run_id);
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  set("TORCHELASTIC_ERROR_FILE", in.error_file);
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
  set("DDPRUN_AGENT_PID", std::to_string(in.agent_pid));
  set("DDPRUN_VERSION", kVersion);
  if (!in.job_tag.empty()) {
    // The list carries every enclosing job's tag too (a ddprun run by a worker of another): the outer
    // job's guard then finds the inner job's processes (common/process/job_guard.hpp).
    const std::string* outer = given("DDPRUN_JOB_TAGS");
    if (!outer) outer = given("DDPRUN_JOB_TAG");
    set("DDPRUN_JOB_TAGS", outer && !outer->empty() ? *outer + "," + in.job_tag : in.job_tag);
    set("DDPRUN_JOB_TAG", in.job_tag);
  }
  // Set or removed, never inherited: a nested ddprun's console is its parent's pipe, not a terminal.
  if (in.console_tty) set("DDPRUN_CONSOLE_TTY", "1");
  else vars.erase("DDPRUN_CONSOLE_TTY");
  if (in.heartbeat_fd >= 0) {
    set("DDPRUN_HEARTBEAT_FD", std::to_string(in.heartbeat_fd));
    set("DDPRUN_HEARTBEAT_OFFSET", std::to_string(in.heartbeat_offset));
    set("DDPRUN_STACKS_FILE", in.stacks_file);
    set("DDPRUN_STACKS_SIGNAL", std::to_string(in.stacks_signal));
  } else {
    // Inherited from an enclosing ddprun (a nested job): its descriptor means nothing here.
    for (const char* k : {"DDPRUN_HEARTBEAT_FD", "DDPRUN_HEARTBEAT_OFFSET", "DDPRUN_STACKS_FILE", "DDPRUN_STACKS_SIGNAL"})
      vars.erase(k);
  }
  // The job's rendezvous secret stays with ddprun: whatever a worker runs (and logs) never sees it.
  vars.erase("DDPRUN_TOKEN");

  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

}  // namespace ddprun::agent
