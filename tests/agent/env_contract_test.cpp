#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "agent/env_contract.hpp"

using namespace ddprun::agent;

namespace {
// Where a node's workers sit: node `node_rank` of `nnodes`, `local` workers from global rank `offset`, of `size`.
World placed(int node_rank, int nnodes, int local, int offset, int size) {
  World w;
  w.node_rank = node_rank;
  w.nnodes = nnodes;
  w.local_world_size = local;
  w.rank_offset = offset;
  w.world_size = size;
  return w;
}
}  // namespace

TEST_CASE("every variable of the torchrun contract is set from the world") {
  World w = placed(1, 2, 4, 4, 8);
  w.master_addr = "10.1.2.3";
  w.master_port = 29511;
  w.run_id = "job7";
  w.role = "trainer";
  w.restart_count = 2;
  w.max_restarts = 3;
  const auto env = worker_environment({"PATH=/bin", "RANK=99"}, w, {3, "/tmp/e.json", 42, "cafe"});
  CHECK(env_value(env, "RANK") == "7");
  CHECK(env_value(env, "LOCAL_RANK") == "3");
  CHECK(env_value(env, "WORLD_SIZE") == "8");
  CHECK(env_value(env, "LOCAL_WORLD_SIZE") == "4");
  CHECK(env_value(env, "GROUP_RANK") == "1");
  CHECK(env_value(env, "GROUP_WORLD_SIZE") == "2");
  CHECK(env_value(env, "ROLE_RANK") == "7");
  CHECK(env_value(env, "ROLE_NAME") == "trainer");
  CHECK(env_value(env, "ROLE_WORLD_SIZE") == "8");
  CHECK(env_value(env, "MASTER_ADDR") == "10.1.2.3");
  CHECK(env_value(env, "MASTER_PORT") == "29511");
  CHECK(env_value(env, "TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(env_value(env, "TORCHELASTIC_MAX_RESTARTS") == "3");
  CHECK(env_value(env, "TORCHELASTIC_RUN_ID") == "job7");
  CHECK(env_value(env, "TORCHELASTIC_ERROR_FILE") == "/tmp/e.json");
  CHECK(env_value(env, "OMP_NUM_THREADS") == "1");
  CHECK(env_value(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env_value(env, "DDPRUN_AGENT_PID") == "42");
  CHECK(env_value(env, "PATH") == "/bin");
}

TEST_CASE("a round's variables for a worker that re-forms in place are the environment's, and only those") {
  World w = placed(1, 3, 2, 4, 6);
  w.master_addr = "node0";
  w.master_port = 29600;
  w.run_id = "job8";
  w.restart_count = 4;
  w.max_restarts = 5;
  const auto vars = round_variables(w, 1);
  CHECK(vars == std::vector<std::string>{"RANK=5", "WORLD_SIZE=6", "GROUP_RANK=1", "GROUP_WORLD_SIZE=3", "ROLE_RANK=5",
                                         "ROLE_WORLD_SIZE=6", "MASTER_ADDR=node0", "MASTER_PORT=29600",
                                         "TORCHELASTIC_RESTART_COUNT=4", "TORCHELASTIC_MAX_RESTARTS=5",
                                         "TORCHELASTIC_RUN_ID=job8"});
  WorkerEnvInputs in{1, "/tmp/e.json", 42, "cafe"};
  in.heartbeat_fd = 5;
  in.reform_file = "/run/w/1/reform.env";
  const auto env = worker_environment({"DDPRUN_REFORM_FILE=/elsewhere"}, w, in);
  for (const auto& v : vars) CHECK(std::find(env.begin(), env.end(), v) != env.end());
  CHECK(env_value(env, "DDPRUN_REFORM_FILE") == "/run/w/1/reform.env");
  in.heartbeat_fd = -1;  // no channel, no re-forming in place: an enclosing job's file is not inherited
  CHECK(env_value(worker_environment({"DDPRUN_REFORM_FILE=/elsewhere"}, w, in), "DDPRUN_REFORM_FILE", "unset") == "unset");
}

TEST_CASE("OMP_NUM_THREADS and TORCH_NCCL_ASYNC_ERROR_HANDLING keep the user's value") {
  World w;
  w.local_world_size = 2;
  const auto env = worker_environment({"OMP_NUM_THREADS=8", "TORCH_NCCL_ASYNC_ERROR_HANDLING=0"}, w, {});
  CHECK(env_value(env, "OMP_NUM_THREADS") == "8");
  CHECK(env_value(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
}

TEST_CASE("both NCCL async error handling names are set for torch 1.x and 2.x, keeping a value given under either") {
  World w;
  const auto plain = worker_environment({}, w, {});
  CHECK(env_value(plain, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "1");
  CHECK(env_value(plain, "NCCL_ASYNC_ERROR_HANDLING") == "1");
  const auto old_name = worker_environment({"NCCL_ASYNC_ERROR_HANDLING=0"}, w, {});
  CHECK(env_value(old_name, "NCCL_ASYNC_ERROR_HANDLING") == "0");
  CHECK(env_value(old_name, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");  // else torch 2.x would turn it back on
  const auto new_name = worker_environment({"TORCH_NCCL_ASYNC_ERROR_HANDLING=3"}, w, {});
  CHECK(env_value(new_name, "NCCL_ASYNC_ERROR_HANDLING") == "3");
  const auto both = worker_environment({"TORCH_NCCL_ASYNC_ERROR_HANDLING=2", "NCCL_ASYNC_ERROR_HANDLING=0"}, w, {});
  CHECK(env_value(both, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == "2");
  CHECK(env_value(both, "NCCL_ASYNC_ERROR_HANDLING") == "0");
}

TEST_CASE("OMP_NUM_THREADS is left unset for a single worker per node") {
  World w;
  w.local_world_size = 1;
  CHECK(env_value(worker_environment({}, w, {}), "OMP_NUM_THREADS", "unset") == "unset");
}

TEST_CASE("the job tag is set and the rendezvous token is not passed on") {
  World w;
  const auto env = worker_environment({"DDPRUN_TOKEN=s3cret", "PATH=/bin"}, w, {0, "/tmp/e.json", 1, "0123abcd"});
  CHECK(env_value(env, "DDPRUN_JOB_TAG") == "0123abcd");
  CHECK(env_value(env, "DDPRUN_TOKEN", "unset") == "unset");
  CHECK(env_value(worker_environment({}, w, {}), "DDPRUN_JOB_TAG", "unset") == "unset");  // no guard, no tag
}

TEST_CASE("a nested job's workers carry the enclosing jobs' tags in DDPRUN_JOB_TAGS, their own last") {
  World w;
  const WorkerEnvInputs own{0, "/tmp/e.json", 1, "inner"};
  CHECK(env_value(worker_environment({}, w, own), "DDPRUN_JOB_TAGS") == "inner");
  // An enclosing ddprun's worker has both variables; an older one only DDPRUN_JOB_TAG.
  const auto nested = worker_environment({"DDPRUN_JOB_TAG=mid", "DDPRUN_JOB_TAGS=outer,mid"}, w, own);
  CHECK(env_value(nested, "DDPRUN_JOB_TAGS") == "outer,mid,inner");
  CHECK(env_value(nested, "DDPRUN_JOB_TAG") == "inner");
  CHECK(env_value(worker_environment({"DDPRUN_JOB_TAG=old"}, w, own), "DDPRUN_JOB_TAGS") == "old,inner");
}

TEST_CASE("each variable appears once") {
  World w;
  const auto env = worker_environment({"A=1", "A=2", "RANK=5"}, w, {});
  int ranks = 0, as = 0;
  for (const auto& e : env) {
    ranks += e.rfind("RANK=", 0) == 0;
    as += e.rfind("A=", 0) == 0;
  }
  CHECK(ranks == 1);
  CHECK(as == 1);
  CHECK(env_value(env, "A") == "1");
}

TEST_CASE("DDPRUN_CONSOLE_TTY says the worker's stdout ends on a terminal, and is never inherited") {
  World w;
  WorkerEnvInputs tty;
  tty.console_tty = true;
  CHECK(env_value(worker_environment({}, w, tty), "DDPRUN_CONSOLE_TTY") == "1");
  // An enclosing ddprun's value says nothing about this one's console.
  CHECK(env_value(worker_environment({"DDPRUN_CONSOLE_TTY=1"}, w, {}), "DDPRUN_CONSOLE_TTY", "unset") == "unset");
}

namespace {
WorkerEnvInputs local_rank(int lr) {
  WorkerEnvInputs in;
  in.local_rank = lr;
  return in;
}

// Every NAME=value of `expected` is in `env` ("unset": NAME is not).
void check_vars(const std::vector<std::string>& env, const std::vector<std::pair<std::string, std::string>>& expected) {
  for (const auto& [name, value] : expected) {
    INFO(name);
    CHECK(env_value(env, name, "unset") == value);
  }
}
}  // namespace

TEST_CASE("in a SLURM task each worker's SLURM_PROCID, SLURM_LOCALID and counts are its own, not its ddprun's") {
  // What srun -N3 --ntasks-per-node=1 gives ddprun on the second node; node 1 of 3 runs 2 workers, node 2 runs 1.
  const std::vector<std::string> task{"SLURM_JOB_ID=7",         "SLURM_STEP_ID=0",        "SLURM_PROCID=1",
                                      "SLURM_LOCALID=0",        "SLURM_NODEID=1",         "SLURM_NTASKS=3",
                                      "SLURM_NPROCS=3",         "SLURM_STEP_NUM_TASKS=3", "SLURM_GTIDS=1",
                                      "SLURM_STEP_TASKS_PER_NODE=1(x3)"};
  World w = placed(1, 3, 2, 2, 5);
  w.nprocs = {2, 2, 1};
  for (int local = 0; local < 2; ++local) {
    const auto env = worker_environment(task, w, local_rank(local));
    CHECK(env_value(env, "SLURM_PROCID") == env_value(env, "RANK"));
    // SLURM_NTASKS_PER_NODE is set even when srun had no --ntasks-per-node (Lightning wants it beside NTASKS).
    check_vars(env, {{"SLURM_PROCID", std::to_string(2 + local)}, {"SLURM_LOCALID", std::to_string(local)},
                     {"SLURM_NODEID", "1"}, {"SLURM_NTASKS", "5"}, {"SLURM_NPROCS", "5"},
                     {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_STEP_NUM_TASKS", "5"},
                     {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_GTIDS", "2,3"}, {"SLURM_JOB_ID", "7"}});
  }
  // An elastic round of other sizes: the same variables follow it.
  w.nnodes = 2;
  w.world_size = 4;
  w.nprocs = {};
  check_vars(worker_environment(task, w, local_rank(1)),
             {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}});
}

TEST_CASE("outside SLURM no SLURM variable is added; absent optional ones stay absent") {
  World w;
  w.local_world_size = 2;
  w.world_size = 2;
  check_vars(worker_environment({"PATH=/bin"}, w, local_rank(1)), {{"SLURM_PROCID", "unset"}, {"SLURM_NTASKS", "unset"}});
  // A batch script (SLURM_PROCID=0, no step): the workers are the job's tasks there too.
  check_vars(worker_environment({"SLURM_JOB_ID=7", "SLURM_PROCID=0"}, w, local_rank(1)),
             {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NUM_TASKS", "unset"}, {"SLURM_GTIDS", "unset"}});
}
