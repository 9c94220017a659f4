#include "launcher/slurm.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "common/contract/worker_contract.hpp"
#include "common/counted.hpp"
#include "common/error.hpp"
#include "launcher/exit_codes.hpp"
#include "launcher/hostlist.hpp"
#include "launcher/option_values.hpp"
#include "launcher/slurm_ports.hpp"

namespace ddprun::launcher {
namespace {

constexpr const char* kOneTaskAdvice = "start one ddprun per node: srun --ntasks-per-node=1 ddprun ...";

[[noreturn]] void bad_variable(const std::string& name, const std::string& value, const std::string& why) {
  throw UsageError(name + "='" + value + "': " + why, kExitUsage);
}

int int_variable(const std::vector<std::string>& env, const std::string& name, int lo) {
  const std::string value = contract::env_value(env, name, "");
  int n = 0;
  if (!parse_int_strict(value, n) || n < lo) bad_variable(name, value, "expected an integer >= " + std::to_string(lo));
  return n;
}

// SLURM_STEP_TASKS_PER_NODE is "2(x3),1": the largest count, or 0 when unreadable.
int most_tasks_on_a_node(const std::string& text) {
  int most = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    int n = 0;
    if (!parse_int_strict(item.substr(0, item.find('(')), n)) return 0;
    most = std::max(most, n);
    pos = end + 1;
  }
  return most;
}

void refuse_several_tasks_per_node(const std::vector<std::string>& env, int nnodes) {
  const std::string localid = contract::env_value(env, "SLURM_LOCALID", "0");
  const std::string per_node = contract::env_value(env, "SLURM_STEP_TASKS_PER_NODE", "");
  const std::string ntasks = contract::env_value(env, "SLURM_STEP_NUM_TASKS", contract::env_value(env, "SLURM_NTASKS", ""));
  int tasks = 0;
  const bool several = localid != "0" || most_tasks_on_a_node(per_node) > 1 ||
                       (parse_int_strict(ntasks, tasks) && tasks > nnodes);
  if (several)
    throw UsageError("this SLURM step runs several tasks per node (SLURM_STEP_TASKS_PER_NODE=" + per_node +
                         ", SLURM_LOCALID=" + localid + "): each node needs exactly one ddprun, which starts "
                         "the workers itself; " + kOneTaskAdvice,
                     kExitUsage);
}

// This node's index in the step: where SLURMD_NODENAME stands in the step's list (SLURM_NODEID decides
// between duplicates, and is the answer when SLURMD_NODENAME is not set).
int step_node_index(const std::vector<std::string>& env, const std::vector<std::string>& hosts,
                    const std::string& list_var, const std::string& list) {
  const int node_id = int_variable(env, "SLURM_NODEID", 0);
  const std::string name = contract::env_value(env, "SLURMD_NODENAME", "");
  if (name.empty()) {
    if (node_id >= static_cast<int>(hosts.size()))
      bad_variable("SLURM_NODEID", std::to_string(node_id), "beyond " + list_var + "='" + list + "'");
    return node_id;
  }
  std::vector<int> at;
  for (std::size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i] == name) at.push_back(static_cast<int>(i));
  if (at.empty()) bad_variable("SLURMD_NODENAME", name, "this node is not in " + list_var + "='" + list + "'");
  if (std::find(at.begin(), at.end(), node_id) != at.end()) return node_id;
  return at.front();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A key's value in slurm.conf (SLURM_CONF, else /etc/slurm/slurm.conf): the last `Key=value` line for it, the
// key matched without regard to case as SLURM does, the value up to the first blank or '#', its quotes taken
// off. "" when the file cannot be read or does not set the key. (Include lines are not followed.)
std::string slurm_conf_value(const std::vector<std::string>& env, const std::string& key) {
  std::ifstream in(contract::env_value(env, "SLURM_CONF", "/etc/slurm/slurm.conf"));
  const std::string wanted = lower(key);
  std::string line, found;
  while (std::getline(in, line)) {
    const auto start = line.find_first_not_of(" \t");
    const auto eq = line.find('=');
    if (start == std::string::npos || eq == std::string::npos || eq < start) continue;
    std::string name = line.substr(start, eq - start);
    name = name.substr(0, name.find_last_not_of(" \t") + 1);
    if (lower(name) != wanted) continue;
    std::string value = line.substr(eq + 1);
    value = value.substr(std::min(value.find_first_not_of(" \t"), value.size()));
    if (!value.empty() && value.front() == '"') value = value.substr(1, value.find('"', 1) - 1);
    else value = value.substr(0, value.find_first_of(" \t#"));
    found = value;
  }
  return found;
}

// SLURM_HET_SIZE (SLURM_PACK_SIZE before 19.05): how many components a heterogeneous job has; 0 when not one.
int het_job_components(const std::vector<std::string>& env) {
  int n = 0;
  if (parse_int_strict(contract::env_value(env, "SLURM_HET_SIZE", contract::env_value(env, "SLURM_PACK_SIZE", "")), n))
    return n;
  return 0;
}

}  // namespace

bool slurm_signals_reach_workers(const std::vector<std::string>& env) {
  if (contract::env_value(env, "SLURM_STEP_ID", "").empty()) return false;
  return lower(slurm_conf_value(env, "ProctrackType")) != "proctrack/pgid";  // unknown: SLURM's default, cgroup
}

std::string slurm_munge_socket(const std::vector<std::string>& env) {
  // AuthInfo=socket=/run/munge/munge.socket.2,ttl=60: comma-separated key=value pairs.
  const std::string info = slurm_conf_value(env, "AuthInfo");
  std::size_t pos = 0;
  while (pos < info.size()) {
    const auto end = std::min(info.find(',', pos), info.size());
    const std::string item = info.substr(pos, end - pos);
    if (item.rfind("socket=", 0) == 0) return item.substr(7);
    pos = end + 1;
  }
  return {};
}

std::string slurm_log_node(const std::vector<std::string>& env) {
  if (contract::env_value(env, "SLURM_STEP_ID", "").empty()) return {};
  const std::string node = contract::env_value(env, "SLURMD_NODENAME", "");
  return valid_host(node) ? node : std::string();
}

void fit_term_timeout_to_kill_wait(bool given, const std::vector<std::string>& env, std::chrono::milliseconds& term,
                                   std::vector<std::string>& notes) {
  using std::chrono::milliseconds;
  if (contract::env_value(env, "SLURM_JOB_ID", "").empty()) return;
  int kill_wait_s = 30;  // SLURM's default
  if (int v = 0; parse_int_strict(slurm_conf_value(env, "KillWait"), v) && v > 0) kill_wait_s = v;
  const milliseconds kill_wait(1000LL * kill_wait_s);
  // A sixth of KillWait (at least 1 s) for the teardown after the grace and the summary: 25 s of 30, 4 s of 5.
  const milliseconds fits = std::chrono::duration_cast<std::chrono::seconds>(
      std::max(milliseconds(1000), kill_wait - std::max(milliseconds(1000), kill_wait / 6)));  // whole seconds
  const auto seconds = [](milliseconds ms) { return std::to_string(ms.count() / 1000) + " s"; };
  if (!given && term > fits) {
    term = fits;
    notes.push_back("--term-timeout " + seconds(term) + ": SLURM's KillWait is " + seconds(kill_wait) +
                    ", and its SIGKILL must not land before ddprun's summary (give --term-timeout to choose)");
  } else if (given && term >= kill_wait) {
    notes.push_back("warning: --term-timeout " + seconds(term) + " is not shorter than SLURM's KillWait (" +
                    seconds(kill_wait) + "): a worker that ignores SIGTERM is SIGKILLed by SLURM before ddprun can "
                    "give its summary");
  }
}

bool apply_slurm_topology(TopologyOptions& o, bool nnodes_given, bool rdzv_port_given,
                          const std::vector<std::string>& env, std::vector<std::string>& notes) {
  const std::string job_text = contract::env_value(env, "SLURM_JOB_ID", "");
  if (job_text.empty()) return false;
  if (nnodes_given || o.node_rank_given || !o.master_addr.empty() || !o.rdzv_endpoint.empty() || o.standalone)
    return false;  // the user said where this node stands: SLURM's view is not needed
  const int job = int_variable(env, "SLURM_JOB_ID", 0);
  int step = 0;
  if (!parse_int_strict(contract::env_value(env, "SLURM_STEP_ID", ""), step) || step < 0) {
    // The batch script or an salloc shell (no SLURM_STEP_ID in 22.05), or one of SLURM's special steps (batch,
    // extern: ids near 2^32, or names): one process on one node of the allocation.
    // A heterogeneous job (sbatch -N1 : -N2, #SBATCH hetjob): the script sees only its first component
    // (SLURM_JOB_NUM_NODES=1 there), yet the job holds the other components' nodes too.
    if (const int components = het_job_components(env); components > 1)
      throw UsageError("ddprun runs outside a job step in SLURM heterogeneous job " + job_text + " of " +
                           counted(components, "component") + " (SLURM_HET_SIZE=" + std::to_string(components) +
                           "), so it would start workers on this node only; " + kOneTaskAdvice +
                           " (srun --het-group=0,1,... for one world over several components)",
                       kExitUsage);
    const std::string job_nodes = contract::env_value(env, "SLURM_JOB_NUM_NODES", contract::env_value(env, "SLURM_NNODES", "1"));
    int n = 1;
    if (parse_int_strict(job_nodes, n) && n <= 1) return false;  // a one-node job: a local run is all there is
    throw UsageError("ddprun runs in SLURM job " + job_text + " of " + job_nodes + " nodes but outside a job step "
                         "(no SLURM_STEP_ID of an srun step: the batch script or an salloc shell), so it would start "
                         "workers on this node only; " + kOneTaskAdvice + " (or --standalone for one node)",
                     kExitUsage);
  }
  const std::string count_var = contract::env_value(env, "SLURM_STEP_NUM_NODES", "").empty() ? "SLURM_NNODES"
                                                                                          : "SLURM_STEP_NUM_NODES";
  const int nnodes = int_variable(env, count_var, 1);
  refuse_several_tasks_per_node(env, nnodes);
  if (nnodes == 1) return false;

  const std::string list_var = "SLURM_STEP_NODELIST";
  const std::string list = contract::env_value(env, list_var, "");
  std::vector<std::string> hosts;
  try {
    hosts = expand_hostlist(list);
  } catch (const HostlistError& e) {
    bad_variable(list_var, list, std::string(e.what()) + "; give --master-addr HOST --nnodes N --node-rank R");
  }
  if (static_cast<int>(hosts.size()) != nnodes)
    bad_variable(list_var, list, "names " + counted(static_cast<long long>(hosts.size()), "host") + " but " +
                                     count_var + " is " + std::to_string(nnodes));
  const std::string& host0 = hosts.front();
  const bool digits_only = std::all_of(host0.begin(), host0.end(), [](char c) { return std::isdigit(c) != 0; });
  if (!valid_host(host0) || digits_only)
    bad_variable(list_var, list, "its first host '" + host0 + "' is not a usable host name (" +
                                     (digits_only ? "it would be read as an IP address" : "invalid characters") +
                                     "); give --master-addr HOST");
  const int node_index = step_node_index(env, hosts, list_var, list);

  o.nnodes = std::to_string(nnodes);
  o.node_rank = std::to_string(node_index);
  o.node_rank_given = true;
  o.master_addr = host0;
  // srun starts every task of the step at once and cannot replace one: a node that failed before joining, or
  // died after, ends the rendezvous within seconds, not at --rdzv-timeout (issue 34).
  if (o.join_grace.empty()) o.join_grace = kSlurmJoinGrace;
  // Each step is a job of its own: two steps of one allocation (a sweep runs many) never share a world.
  if (o.run_id == "none" && o.rdzv_id.empty()) o.run_id = "slurm-" + job_text + "." + std::to_string(step);
  // The step's own rendezvous. A run id the user gave (torchrun's habit, --rdzv-id $SLURM_JOB_ID) is the same
  // for every step, and so was the token derived from it: concurrent steps could merge into one world (issue
  // 34). The token is bound to this step, on the automatic ports and on a --rdzv-port given alike: two steps
  // told one fixed port merged 2 times of 6 while only the automatic ports were bound (issue 54). Now the
  // second step's node 0 finds the port taken and its nodes are refused by the first step's server.
  o.token_scope = "slurm job " + job_text + " step " + std::to_string(step);
  if (!rdzv_port_given) {
    const std::vector<int> ports = slurm_rdzv_ports(static_cast<std::uint64_t>(job), static_cast<std::uint64_t>(step));
    o.rdzv_port = std::to_string(ports.front());
    o.more_rdzv_ports.assign(ports.begin() + 1, ports.end());
  }
  notes.push_back("SLURM job " + job_text + " step " + contract::env_value(env, "SLURM_STEP_ID", "") + ": node " +
                  o.node_rank + " of " + o.nnodes + " (" + list + "), rendezvous at " + host0 + ":" + o.rdzv_port +
                  (o.more_rdzv_ports.empty() ? "" : " (or the next free of " + std::to_string(o.more_rdzv_ports.size() + 1) +
                                                       " candidates)"));
  return true;
}

}  // namespace ddprun::launcher
