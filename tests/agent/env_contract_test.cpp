#include <doctest/doctest.h>

#include "agent/env_contract.hpp"

using namespace ddprun::agent;

TEST_CASE("every variable of the torchrun contract is set from the world") {
  World w;
  w.node_rank = 1;
  w.nnodes = 2;
  w.local_world_size = 4;
  w.rank_offset = 4;
  w.world_size = 8;
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
