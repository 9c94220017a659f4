// `srun --ntasks-per-node=1 ddprun --nproc-per-node 4 ./train`: inside a SLURM job step that spans several
// nodes, the topology comes from SLURM's environment, so no address has to be typed.
//
// Always the STEP's view: a step may run on a subset of the job's nodes (`srun -N2 -r1`, `-w`, `-x`), and then
// SLURM_JOB_NODELIST/SLURM_NODELIST still name the whole job. The step's nodes are SLURM_STEP_NODELIST,
// their count SLURM_STEP_NUM_NODES, and this node's index the position of SLURMD_NODENAME in that list (SLURM
// 22.05's srun sets SLURM_NODEID to the same relative index; there is no SLURM_STEP_NODEID).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher/topology.hpp"

namespace ddprun::launcher {

// Fills what the user left out when ddprun runs in a SLURM job and no --nnodes, --node-rank, --master-addr,
// --rdzv-endpoint or --standalone was given:
// - in a step over several nodes: static node ranks, node 0 = the step's first host, run id "slurm-JOBID",
//   rendezvous port 29400 + JOBID % 1000 (jobs sharing a first node do not collide), --join-grace 5 s. Returns
//   true.
// - in a one-node step: nothing (a local job). Returns false.
// Throws UsageError (exit 64) with advice when ddprun was run outside any step in a job of several nodes or in
// a heterogeneous job (the batch script or an salloc shell: the other nodes would never start a ddprun; a het
// job's script sees one component only), when the step runs several
// tasks on a node (several ddprun would share each node), or when a SLURM variable cannot be understood
// (naming the variable and its value): never a silent single-node job.
// --join-grace in a step of several nodes, unless given: srun starts the step's tasks within a second or two
// of each other, ddprun's own start takes milliseconds, and a task cannot be replaced.
inline constexpr const char* kSlurmJoinGrace = "5";

bool apply_slurm_topology(TopologyOptions& o, bool nnodes_given, bool rdzv_port_given,
                          const std::vector<std::string>& env, std::vector<std::string>& notes);

// Whether slurmstepd's signals (scancel -s, scancel's SIGTERM, --signal without B:, srun's Ctrl-C) reach
// every process of this step, the workers included: true in a step unless slurm.conf (SLURM_CONF, else
// /etc/slurm/slurm.conf) says ProctrackType=proctrack/pgid, which signals only the task's process group (each
// worker has its own). cgroup (SLURM's default, and most clusters') and linuxproc signal the whole step.
bool slurm_signals_reach_workers(const std::vector<std::string>& env);

// munged's socket as slurm.conf names it (AuthInfo=socket=PATH; SLURM_CONF, else /etc/slurm/slurm.conf), "" when
// it names none: where ddprun asks for MUNGE credentials when DDPRUN_MUNGE_SOCKET is not set.
std::string slurm_munge_socket(const std::vector<std::string>& env);

// The node's name for ddprun's log lines in a SLURM step (SLURMD_NODENAME), where every node's lines meet in one
// slurm-%j.out and must say which node wrote them (issue 34); "" elsewhere.
std::string slurm_log_node(const std::vector<std::string>& env);

// In a SLURM job, SLURM's SIGKILL follows its SIGTERM after slurm.conf's KillWait (30 s by default): a grace as
// long as that lets it land before ddprun's summary (issue 34: the default --term-timeout, 30 s, equalled it).
// Not given: --term-timeout becomes five sixths of KillWait (at least 1 s) when it is longer, with a note; given and not
// shorter than KillWait: a warning. Outside a SLURM job nothing changes.
void fit_term_timeout_to_kill_wait(bool given, const std::vector<std::string>& env, std::chrono::milliseconds& term,
                                   std::vector<std::string>& notes);

}  // namespace ddprun::launcher
