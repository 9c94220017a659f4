// `srun --ntasks-per-node=1 ddprun --nproc-per-node 4 ./train`: inside a SLURM job step that spans several
// nodes, the topology comes from SLURM's environment, so no address has to be typed.
#pragma once

#include <string>
#include <vector>

#include "launcher/topology.hpp"

namespace ddprun::launcher {

// The first host of a SLURM host list: "gpu[07-09,12],cpu1" → "gpu07". Empty if malformed.
std::string first_slurm_host(const std::string& nodelist);

// Fills what the user left out from SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST and SLURM_JOB_ID when they
// describe more than one node, and no --nnodes, --node-rank, --master-addr or --rdzv-endpoint was given:
// static node ranks, node 0 = the first host, run id "slurm-JOBID", rendezvous port 29400 + JOBID % 1000 (jobs
// sharing a first node do not collide). Returns whether it did.
bool apply_slurm_topology(TopologyOptions& o, bool nnodes_given, bool rdzv_port_given,
                          const std::vector<std::string>& env, std::vector<std::string>& notes);

}  // namespace ddprun::launcher
