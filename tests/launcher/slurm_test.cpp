// The SLURM topology rules of launcher/slurm.hpp, on environments copied from what SLURM 22.05's srun, sbatch
// and salloc set (seen on the real test cluster of tests/slurm/).
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "common/error.hpp"
#include "launcher/cli.hpp"
#include "launcher/exit_codes.hpp"
#include "launcher/host_resources.hpp"
#include "launcher/slurm.hpp"
#include "launcher/slurm_ports.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using Env = std::vector<std::string>;

namespace {

// `srun -N2 -r1` in a 3-node job, on n3: srun sets the step's count and this node's step-relative id, but the
// job's node list stays in SLURM_JOB_NODELIST and SLURM_NODELIST.
Env step_env(const std::string& node, const std::string& node_id) {
  return {"PATH=/usr/bin:/bin",          "SLURM_JOB_ID=123456",         "SLURM_STEP_ID=0",
          "SLURM_JOB_NODELIST=n[1-3]",    "SLURM_NODELIST=n[1-3]",       "SLURM_JOB_NUM_NODES=3",
          "SLURM_STEP_NODELIST=n[2-3]",   "SLURM_STEP_NUM_NODES=2",      "SLURM_NNODES=2",
          "SLURM_NODEID=" + node_id,      "SLURMD_NODENAME=" + node,     "SLURM_LOCALID=0",
          "SLURM_STEP_TASKS_PER_NODE=1(x2)", "SLURM_STEP_NUM_TASKS=2"};
}

Env with(Env env, const std::string& name, const std::string& value) {
  for (auto& item : env)
    if (item.rfind(name + "=", 0) == 0) item = name + "=" + value;
  if (value.empty()) env.erase(std::remove(env.begin(), env.end(), name + "="), env.end());
  return env;
}

std::string usage_error(const std::vector<std::string>& args, const Env& env) {
  try {
    parse_command_line(args, env);
  } catch (const ddprun::UsageError& e) {
    CHECK(e.exit_code() == kExitUsage);
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a step on a subset of the job takes node 0, the count and this node's index from the step") {
  const auto c = parse_command_line({"true"}, step_env("n3", "1"));
  CHECK(c.agent.rdzv.job.max_nodes == 2);
  CHECK(*c.agent.rdzv.node_rank == 1);
  CHECK(c.agent.rdzv.server_host == "n2");
  CHECK(c.agent.world.master_addr == "n2");
  const std::vector<int> ports = slurm_rdzv_ports(123456, 0);
  CHECK(c.agent.rdzv.server_port == ports.front());
  CHECK(c.agent.rdzv.more_server_ports == std::vector<int>(ports.begin() + 1, ports.end()));
  CHECK(c.agent.world.run_id == "slurm-123456.0");
  const auto node0 = parse_command_line({"true"}, step_env("n2", "0"));
  CHECK(*node0.agent.rdzv.node_rank == 0);
}

TEST_CASE("a step of several nodes waits 5 s for a missing node, not the rendezvous timeout; --join-grace wins") {
  using std::chrono::milliseconds;
  CHECK(parse_command_line({"true"}, step_env("n3", "1")).agent.rdzv.job.join_grace == milliseconds(5'000));
  CHECK(parse_command_line({"--join-grace", "30", "true"}, step_env("n3", "1")).agent.rdzv.job.join_grace ==
        milliseconds(30'000));
  CHECK(parse_command_line({"--join-grace", "0", "true"}, step_env("n3", "1")).agent.rdzv.job.join_grace ==
        milliseconds(0));
  // Outside SLURM, and where the user placed the node himself: off unless given.
  CHECK(parse_command_line({"--nnodes", "2", "--node-rank", "1", "--master-addr", "h", "true"}, {})
            .agent.rdzv.job.join_grace == milliseconds(0));
  CHECK(parse_command_line({"--nnodes", "2", "--node-rank", "1", "--master-addr", "h", "true"}, step_env("n3", "1"))
            .agent.rdzv.job.join_grace == milliseconds(0));
}

TEST_CASE("each step has its own run id and its own candidate ports, the same on every node of the step") {
  const auto a = parse_command_line({"true"}, step_env("n3", "1"));
  const auto a0 = parse_command_line({"true"}, step_env("n2", "0"));
  const auto b = parse_command_line({"true"}, with(step_env("n3", "1"), "SLURM_STEP_ID", "1"));
  CHECK(a.agent.world.run_id == a0.agent.world.run_id);
  CHECK(a.agent.rdzv.server_port == a0.agent.rdzv.server_port);
  CHECK(a.agent.rdzv.more_server_ports == a0.agent.rdzv.more_server_ports);
  CHECK(b.agent.world.run_id == "slurm-123456.1");
  CHECK(b.agent.rdzv.server_port != a.agent.rdzv.server_port);
  // --rdzv-port: exactly that port, no candidates.
  const auto fixed = parse_command_line({"--rdzv-port", "29999", "true"}, step_env("n3", "1"));
  CHECK(fixed.agent.rdzv.server_port == 29999);
  CHECK(fixed.agent.rdzv.more_server_ports.empty());
}

TEST_CASE("a SLURM step's candidate ports: 8 distinct, in 29400-30399, and jobs 1000 apart differ") {
  for (std::uint64_t job : {1ULL, 1001ULL, 123456ULL, 4294967295ULL}) {
    const std::vector<int> ports = slurm_rdzv_ports(job, 0);
    CHECK(ports.size() == 8);
    CHECK(std::set<int>(ports.begin(), ports.end()).size() == 8);
    for (int p : ports) CHECK((p >= 29400 && p < 30400));
  }
  CHECK(slurm_rdzv_ports(1, 0) != slurm_rdzv_ports(1001, 0));
  CHECK(slurm_rdzv_ports(7, 0) == slurm_rdzv_ports(7, 0));
}

// Issue 34: the candidates were all-or-nothing (126 distinct lists over job ids 1-100 000; two jobs that shared
// one candidate shared all 8). Each is independent now.
TEST_CASE("two jobs that share a candidate port rarely share the next") {
  std::set<std::vector<int>> lists;
  int share_first = 0, share_second_too = 0;
  const std::vector<int> one = slurm_rdzv_ports(1, 0);
  for (std::uint64_t job = 1; job <= 100'000; ++job) {
    const std::vector<int> ports = slurm_rdzv_ports(job, 0);
    lists.insert(ports);
    if (job != 1 && ports[0] == one[0]) {
      ++share_first;
      share_second_too += ports[1] == one[1];
    }
  }
  CHECK(lists.size() >= 99'990);
  CHECK(share_first > 50);  // about 100 of 100 000 jobs share job 1's first port
  CHECK(share_second_too <= 3);
}

TEST_CASE("this node's index is where SLURMD_NODENAME stands in the step list, SLURM_NODEID without it") {
  Env env = with(step_env("n3", "1"), "SLURM_STEP_NODELIST", "n[1,3]");
  CHECK(*parse_command_line({"true"}, env).agent.rdzv.node_rank == 1);
  CHECK(parse_command_line({"true"}, env).agent.world.master_addr == "n1");
  env = with(step_env("n3", "1"), "SLURMD_NODENAME", "");
  CHECK(*parse_command_line({"true"}, env).agent.rdzv.node_rank == 1);
  CHECK(usage_error({"true"}, step_env("n1", "0")) ==
        "SLURMD_NODENAME='n1': this node is not in SLURM_STEP_NODELIST='n[2-3]'");
}

TEST_CASE("options that place the node win over SLURM; a one-node step is a local job") {
  CHECK(parse_command_line({"--nnodes", "1", "true"}, step_env("n3", "1")).agent.rdzv.job.max_nodes == 1);
  CHECK(parse_command_line({"--standalone", "true"}, step_env("n3", "1")).agent.rdzv.job.max_nodes == 1);
  Env one = with(with(with(step_env("n2", "0"), "SLURM_STEP_NUM_NODES", "1"), "SLURM_STEP_NODELIST", "n2"),
                 "SLURM_STEP_TASKS_PER_NODE", "1");
  one = with(one, "SLURM_STEP_NUM_TASKS", "1");
  CHECK(parse_command_line({"true"}, one).agent.rdzv.job.max_nodes == 1);
}

TEST_CASE("an unreadable step node list is exit 64 naming the variable and its value, never a one-node job") {
  CHECK(usage_error({"true"}, with(step_env("n3", "1"), "SLURM_STEP_NODELIST", "n[2-3")) ==
        "SLURM_STEP_NODELIST='n[2-3': unclosed '[' in 'n[2-3'; give --master-addr HOST --nnodes N --node-rank R");
  CHECK(usage_error({"true"}, with(step_env("n3", "1"), "SLURM_STEP_NODELIST", "n[2-4]")) ==
        "SLURM_STEP_NODELIST='n[2-4]': names 3 hosts but SLURM_STEP_NUM_NODES is 2");
  CHECK(usage_error({"true"}, with(step_env("n2", "0"), "SLURM_STEP_NODELIST", "n2")) ==
        "SLURM_STEP_NODELIST='n2': names 1 host but SLURM_STEP_NUM_NODES is 2");
  CHECK(usage_error({"true"}, with(step_env("2", "1"), "SLURM_STEP_NODELIST", "[1-2]"))
            .find("'1' is not a usable host name (it would be read as an IP address)") != std::string::npos);
  CHECK(usage_error({"true"}, with(step_env("n3", "1"), "SLURM_STEP_NUM_NODES", "two")) ==
        "SLURM_STEP_NUM_NODES='two': expected an integer >= 1");
}

TEST_CASE("ddprun outside a step in a job of several nodes is refused with advice; in a one-node job it runs") {
  const Env batch{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_JOB_NUM_NODES=2",
                  "SLURM_NNODES=2", "SLURM_NODEID=0", "SLURM_NODELIST=n[1-2]", "SLURM_LOCALID=0"};
  const std::string why = usage_error({"true"}, batch);
  CHECK(why.find("outside a job step") != std::string::npos);
  CHECK(why.find("srun --ntasks-per-node=1 ddprun") != std::string::npos);
  CHECK(parse_command_line({"--standalone", "true"}, batch).agent.rdzv.job.max_nodes == 1);
  Env batch_step = batch;  // SLURM's special step ids (batch 4294967291, extern 4294967292) are not srun steps
  batch_step.push_back("SLURM_STEP_ID=4294967291");
  CHECK(usage_error({"true"}, batch_step).find("outside a job step") != std::string::npos);
  const Env one{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n1", "SLURM_JOB_NUM_NODES=1",
                "SLURM_NNODES=1"};
  CHECK(parse_command_line({"true"}, one).agent.rdzv.job.max_nodes == 1);
}

TEST_CASE("several tasks per node are refused with advice, whichever variable shows it") {
  const Env two = with(with(step_env("n3", "1"), "SLURM_STEP_TASKS_PER_NODE", "2(x2)"), "SLURM_STEP_NUM_TASKS", "4");
  CHECK(usage_error({"true"}, two).find("srun --ntasks-per-node=1") != std::string::npos);
  CHECK(usage_error({"true"}, with(step_env("n3", "1"), "SLURM_LOCALID", "1")).find("several tasks per node") !=
        std::string::npos);
  CHECK(usage_error({"true"}, with(step_env("n3", "1"), "SLURM_STEP_NUM_TASKS", "3")).find("several tasks") !=
        std::string::npos);
}

TEST_CASE("the batch script of a heterogeneous job is refused with the srun advice, even when it sees one node") {
  // What SLURM 22.05 sets in the batch script of `sbatch -N1 : -N2` (the first component's view, plus *_HET_*).
  const Env het{"PATH=/usr/bin:/bin",       "SLURM_JOB_ID=780707",   "SLURM_JOB_NODELIST=n1",
                "SLURM_JOB_NUM_NODES=1",    "SLURM_NNODES=1",        "SLURM_NODEID=0",
                "SLURM_LOCALID=0",          "SLURM_PROCID=0",        "SLURMD_NODENAME=n1",
                "SLURM_HET_SIZE=2",         "SLURM_PACK_SIZE=2",     "SLURM_JOB_NODELIST_HET_GROUP_0=n1",
                "SLURM_JOB_NODELIST_HET_GROUP_1=n[2-3]", "SLURM_JOB_NUM_NODES_HET_GROUP_1=2"};
  const std::string why = usage_error({"true"}, het);
  CHECK(why.find("outside a job step in SLURM heterogeneous job 780707 of 2 components") != std::string::npos);
  CHECK(why.find("srun --ntasks-per-node=1 ddprun") != std::string::npos);
  CHECK(why.find("--het-group") != std::string::npos);
  CHECK(parse_command_line({"--standalone", "true"}, het).agent.rdzv.job.max_nodes == 1);
  // A step of a heterogeneous job (srun --het-group=1, or srun over all components) is a step like any other:
  // SLURM 22.05 gives it one node list and node ids across its components.
  Env step = step_env("n3", "1");
  step.push_back("SLURM_HET_SIZE=2");
  const auto c = parse_command_line({"true"}, step);
  CHECK(c.agent.rdzv.job.max_nodes == 2);
  CHECK(*c.agent.rdzv.node_rank == 1);
}

TEST_CASE("reports name the node as SLURM does (SLURMD_NODENAME), else the machine's hostname") {
  CHECK(parse_command_line({"true"}, step_env("n3", "1")).agent.host == "n3");
  const auto plain = parse_command_line({"true"}, {"PATH=/usr/bin:/bin"}).agent.host;
  CHECK(!plain.empty());
  CHECK(parse_command_line({"true"}, {"PATH=/usr/bin:/bin", "SLURMD_NODENAME=bad name"}).agent.host == plain);
}

TEST_CASE("slurm.conf is read once for every key: ProctrackType and AuthInfo's munged socket") {
  TempDir dir;
  const std::string conf = dir.file("slurm.conf",
                                    "# AuthInfo=socket=/commented/out\n"
                                    "ClusterName=c\n"
                                    "  authinfo = socket=/var/run/munge/other.socket,ttl=60 # the site's munged\n"
                                    "PROCTRACKTYPE=Proctrack/PGID\n");
  Env env = step_env("n3", "1");
  env.push_back("SLURM_CONF=" + conf);
  CHECK(slurm_munge_socket(env) == "/var/run/munge/other.socket");
  CHECK_FALSE(slurm_signals_reach_workers(env));
  const std::string quoted = dir.file("quoted.conf", "AuthInfo=\"ttl=30,socket=/m/s\"\nProctrackType=proctrack/cgroup\n");
  env.back() = "SLURM_CONF=" + quoted;
  CHECK(slurm_munge_socket(env) == "/m/s");
  CHECK(slurm_signals_reach_workers(env));
  env.back() = "SLURM_CONF=" + dir.path + "/missing.conf";
  CHECK(slurm_munge_socket(env).empty());
  CHECK(slurm_signals_reach_workers(env));
}

TEST_CASE("without DDPRUN_MUNGE_SOCKET a SLURM step asks the munged that slurm.conf names") {
  TempDir dir;
  Env env = step_env("n3", "1");
  env.push_back("SLURM_CONF=" + dir.file("slurm.conf", "AuthInfo=socket=/cluster/munge.socket\n"));
  CHECK(parse_command_line({"true"}, env).agent.rdzv.job.munge_socket == "/cluster/munge.socket");
  env.push_back("DDPRUN_MUNGE_SOCKET=/mine.socket");
  CHECK(parse_command_line({"true"}, env).agent.rdzv.job.munge_socket == "/mine.socket");
}

// Issue 34: --nproc-per-node cpu followed the affinity mask only; with SLURM's task/none plugin the mask is the
// whole node, and --cpus-per-task 1 got a worker per CPU of the node.
TEST_CASE("--nproc-per-node cpu and auto take SLURM_CPUS_PER_TASK when it is fewer than the usable CPUs") {
  auto per_task = [](const std::string& value) {
    Env env = step_env("n3", "1");
    env.push_back("SLURM_CPUS_PER_TASK=" + value);
    return env;
  };
  const auto one = parse_command_line({"--nproc-per-node", "cpu", "true"},
                                      per_task("1"));
  CHECK(one.agent.world.local_world_size == 1);
  bool said = false;
  for (const auto& n : one.notes) said |= n.find("using 1 (SLURM_CPUS_PER_TASK)") != std::string::npos;
  CHECK(said == (usable_cpu_count() > 1));
  const auto many = parse_command_line({"--nproc-per-node", "cpu", "true"},
                                       per_task("100000"));
  CHECK(many.agent.world.local_world_size == usable_cpu_count());  // never more than the node can run
  const auto junk = parse_command_line({"--nproc-per-node", "cpu", "true"},
                                       per_task("2(x3)"));
  CHECK(junk.agent.world.local_world_size == usable_cpu_count());
}

// Issue 34: with a run id the user gave (torchrun's --rdzv-id $SLURM_JOB_ID) every step had the same run id and
// the same token, so concurrent steps could merge into one world. The token is bound to the step.
TEST_CASE("a given run id is shared by the steps, but each step's token is its own") {
  const Env step0 = step_env("n3", "1");
  const Env step0_node0 = step_env("n2", "0");
  const Env step1 = with(step_env("n3", "1"), "SLURM_STEP_ID", "1");
  auto parsed = [](const Env& env) { return parse_command_line({"--rdzv-id", "123456", "true"}, env); };
  const auto a = parsed(step0), a0 = parsed(step0_node0), b = parsed(step1);
  CHECK(a.agent.world.run_id == "123456");
  CHECK(b.agent.world.run_id == "123456");
  CHECK(a.agent.rdzv.job.token == a0.agent.rdzv.job.token);  // one step: every node the same
  CHECK(a.agent.rdzv.job.token != b.agent.rdzv.job.token);
  CHECK(a.agent.rdzv.job.public_token);  // still derived from public facts: the server warns beyond loopback
  // Issue 54: a fixed --rdzv-port (docs/MULTINODE.md advises one) is bound to the step too: two steps told
  // the same port merged 2 times of 6 when only the automatic ports were.
  auto fixed = [](const Env& env) {
    return parse_command_line({"--rdzv-id", "123456", "--rdzv-port", "29999", "true"}, env);
  };
  CHECK(fixed(step0).agent.rdzv.job.token == a.agent.rdzv.job.token);
  CHECK(fixed(step0).agent.rdzv.job.token == fixed(step0_node0).agent.rdzv.job.token);
  CHECK(fixed(step0).agent.rdzv.job.token != fixed(step1).agent.rdzv.job.token);
  CHECK(fixed(step0).agent.rdzv.server_port == 29999);
}

// Issue 34: the default --term-timeout (30 s) equalled SLURM's default KillWait: at a time limit with workers that
// ignore SIGTERM, SLURM's SIGKILL landed before ddprun's summary.
TEST_CASE("in a SLURM job --term-timeout ends before KillWait, or a given one is warned about") {
  TempDir dir;
  const std::string conf = dir.file("slurm.conf", "ClusterName=t\nKillWait=20\n");
  Env env = step_env("n3", "1");
  const auto plain = parse_command_line({"true"}, env);
  CHECK(plain.agent.term_timeout == std::chrono::seconds(25));  // five sixths of KillWait's default 30 s
  env.push_back("SLURM_CONF=" + conf);
  const auto fitted = parse_command_line({"true"}, env);
  CHECK(fitted.agent.term_timeout == std::chrono::seconds(16));
  bool said = false;
  for (const auto& n : fitted.notes) said |= n.find("--term-timeout 16 s: SLURM's KillWait is 20 s") != std::string::npos;
  CHECK(said);
  const auto given = parse_command_line({"--term-timeout", "40", "true"}, env);
  CHECK(given.agent.term_timeout == std::chrono::seconds(40));
  bool warned = false;
  for (const auto& n : given.notes) warned |= n.rfind("warning: --term-timeout 40 s is not shorter than SLURM's KillWait", 0) == 0;
  CHECK(warned);
  const auto shorter = parse_command_line({"--term-timeout", "5", "true"}, env);
  CHECK(shorter.agent.term_timeout == std::chrono::seconds(5));
}
