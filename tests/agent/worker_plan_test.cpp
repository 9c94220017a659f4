// What a worker is started with (agent/worker_plan.hpp), decided without a process: argv with
// --local-rank-arg, stdin for --stdin-rank alone, the heartbeat page inherited, the environment's contract.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>

#include "agent/worker_plan.hpp"
#include "common/contract/worker_contract.hpp"
#include "rendezvous/protocol.hpp"

using namespace ddprun::agent;
namespace contract = ddprun::contract;

namespace {

struct Fixture {
  AgentConfig config;
  World world;
  WorkerFacts facts;
  Fixture() {
    config.program = "/usr/bin/python3";
    config.argv = {"python3", "train.py", "--epochs", "3"};
    config.base_env = {"PATH=/usr/bin", "RANK=99", "DDPRUN_TOKEN=secret"};
    world.node_rank = 1;
    world.nnodes = 2;
    world.local_world_size = 4;
    world.rank_offset = 4;
    world.world_size = 8;
    facts.agent_pid = 4242;
    facts.error_file = "/run/w1/error.json";
  }
  static std::string env(const ddprun::process::SpawnOptions& o, const std::string& name) {
    const std::string prefix = name + "=";
    for (const std::string& e : o.env)
      if (e.rfind(prefix, 0) == 0) return e.substr(prefix.size());
    return "<unset>";
  }
};

}  // namespace

TEST_CASE("a worker's plan: its ranks in the environment, the launcher's own values replaced, the token gone") {
  Fixture f;
  const auto o = plan_worker(f.config, f.world, 2, f.facts);
  CHECK(o.program == "/usr/bin/python3");
  CHECK(o.argv == f.config.argv);
  CHECK(Fixture::env(o, contract::kRank) == "6");
  CHECK(Fixture::env(o, contract::kLocalRank) == "2");
  CHECK(Fixture::env(o, "WORLD_SIZE") == "8");
  CHECK(Fixture::env(o, contract::kErrorFile) == "/run/w1/error.json");
  CHECK(Fixture::env(o, "DDPRUN_TOKEN") == "<unset>");
  CHECK(Fixture::env(o, contract::kHeartbeatFd) == "<unset>");  // no heartbeat page, none inherited
  CHECK(o.inherit_fds.empty());
  CHECK(o.stdin_fd == -1);  // /dev/null
  CHECK_FALSE(o.take_terminal);
}

TEST_CASE("a round's assignment moves this node's workers; what the node chose (its count, its role) stays") {
  Fixture f;
  f.world.role = "trainer";
  ddprun::rendezvous::Assignment a;
  a.node_rank = 0;
  a.nnodes = 3;
  a.rank_offset = 0;
  a.world_size = 12;
  a.nprocs = {4, 4, 4};
  a.master_addr = "10.1.2.3";
  a.master_port = 29600;
  a.run_id = "job7";
  a.restart_count = 2;
  a.max_restarts = 3;
  take_assignment(f.world, a);
  const auto o = plan_worker(f.config, f.world, 3, f.facts);
  CHECK(Fixture::env(o, contract::kRank) == "3");
  CHECK(Fixture::env(o, "WORLD_SIZE") == "12");
  CHECK(Fixture::env(o, contract::kGroupWorldSize) == "3");
  CHECK(Fixture::env(o, contract::kMasterAddr) == "10.1.2.3");
  CHECK(Fixture::env(o, contract::kMasterPort) == "29600");
  CHECK(Fixture::env(o, contract::kRunId) == "job7");
  CHECK(Fixture::env(o, contract::kRestartCount) == "2");
  CHECK(Fixture::env(o, contract::kMaxRestarts) == "3");
  CHECK(Fixture::env(o, contract::kRoleName) == "trainer");
  CHECK(Fixture::env(o, contract::kLocalWorldSize) == "4");
}

TEST_CASE("--local-rank-arg goes where torch.distributed.launch put it, with this worker's local rank") {
  Fixture f;
  f.config.local_rank_arg = "--local-rank";
  f.config.local_rank_arg_at = 1;  // after the interpreter, before the script
  const auto o = plan_worker(f.config, f.world, 3, f.facts);
  CHECK(o.argv == std::vector<std::string>{"python3", "--local-rank=3", "train.py", "--epochs", "3"});
}

TEST_CASE("--stdin-rank: that global rank alone reads ddprun's stdin, and takes the terminal only in the foreground") {
  Fixture f;
  f.config.stdin_rank = 5;
  f.facts.stdin_is_foreground_terminal = true;
  CHECK(plan_worker(f.config, f.world, 0, f.facts).stdin_fd == -1);  // rank 4
  const auto o = plan_worker(f.config, f.world, 1, f.facts);        // rank 5
  CHECK(o.stdin_fd == STDIN_FILENO);
  CHECK(o.take_terminal);
  f.facts.stdin_is_foreground_terminal = false;
  CHECK_FALSE(plan_worker(f.config, f.world, 1, f.facts).take_terminal);
}

TEST_CASE("the heartbeat page is inherited with this rank's slot; stacks only under --hang-timeout") {
  Fixture f;
  f.facts.heartbeat_fd = 7;
  f.facts.reform_file = "/run/w1/reform";
  f.facts.stacks_file = "/run/w1/stacks";
  f.facts.stacks_signal = 35;
  auto o = plan_worker(f.config, f.world, 2, f.facts);
  CHECK(o.inherit_fds == std::vector<int>{7});
  CHECK(Fixture::env(o, contract::kHeartbeatFd) == "7");
  CHECK(Fixture::env(o, contract::kReformFile) == "/run/w1/reform");
  CHECK(Fixture::env(o, contract::kStacksFile) == "<unset>");
  f.config.hang_timeout = std::chrono::seconds(30);
  o = plan_worker(f.config, f.world, 2, f.facts);
  CHECK(Fixture::env(o, contract::kStacksFile) == "/run/w1/stacks");
}

TEST_CASE("DDPRUN_CONSOLE_TTY only when the worker's stdout reaches the terminal alone") {
  Fixture f;
  CHECK(Fixture::env(plan_worker(f.config, f.world, 0, f.facts), contract::kConsoleTty) == "<unset>");
  f.facts.stdout_to_terminal_only = true;
  CHECK(Fixture::env(plan_worker(f.config, f.world, 0, f.facts), contract::kConsoleTty) == "1");
}
