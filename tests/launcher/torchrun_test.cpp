// Real torchrun and torch.distributed.launch command lines through ddprun's parser: each is accepted with
// the configuration torchrun would run, or refused with one line (exit 64) saying what to use instead.
// docs/TORCHRUN.md is the same table for people.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/error.hpp"
#include "launcher/arg_matching.hpp"
#include "launcher/cli.hpp"
#include "launcher/exit_codes.hpp"

using namespace ddprun::launcher;
using ddprun::UsageError;
using ddprun::agent::Hosting;

namespace {

// A real file for the lines that run train.py (ddprun checks the script exists before starting anything).
struct TempScript {
  std::string dir, path;
  TempScript() {
    char d[] = "/tmp/ddprun-torchrun-test-XXXXXX";
    REQUIRE(::mkdtemp(d) != nullptr);
    dir = d;
    path = dir + "/train.py";
    std::ofstream(path) << "print('hi')\n";
  }
  ~TempScript() { std::filesystem::remove_all(dir); }
};

const std::string& train_py() {
  static const TempScript script;
  return script.path;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w == "train.py" ? train_py() : w);
  return out;
}

bool has_note(const CommandLine& c, const std::string& start) {
  return std::any_of(c.notes.begin(), c.notes.end(), [&](const std::string& n) { return n.rfind(start, 0) == 0; });
}

struct Verdict {
  std::string line;                                 // after "torchrun"
  std::vector<std::string> env;                     // added to PATH
  std::string refusal;                              // non-empty: refused (64) with this in the message
  std::function<void(const CommandLine&)> check{};  // accepted: what the configuration must be
};

const std::vector<Verdict>& verdicts() {
  using C = const CommandLine&;
  static const std::vector<Verdict> table = {
      // --- accepted, same meaning ---
      {"--standalone --nnodes=1 --nproc-per-node=4 train.py --lr 0.1", {}, "",
       [](C c) {
         CHECK(c.agent.world.local_world_size == 4);
         CHECK(c.agent.rdzv.hosting == Hosting::kYes);
         CHECK(c.agent.argv == std::vector<std::string>{"python3", "-u", train_py(), "--lr", "0.1"});
       }},
      {"--nproc_per_node=2 train.py", {}, "", [](C c) { CHECK(c.agent.world.local_world_size == 2); }},
      {"--nnodes=1:1 --nproc-per-node 3 train.py", {}, "", [](C c) { CHECK(c.agent.rdzv.job.max_nodes == 1); }},
      {"--nnodes=2 --nproc_per_node=8 --rdzv_id=100 --rdzv_backend=c10d --rdzv_endpoint=node0:29400 train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.job.max_nodes == 2);
         CHECK(c.agent.rdzv.server_host == "node0");
         CHECK(c.agent.rdzv.server_port == 29400);
         CHECK(c.agent.rdzv.hosting == Hosting::kIfLocal);
         CHECK(c.agent.world.run_id == "100");
       }},
      // torchrun's documented one-node form: port 0 is a free port here, so no --rdzv-id is needed.
      {"--rdzv-backend=c10d --rdzv-endpoint=localhost:0 --nnodes=1 --nproc-per-node=2 train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.hosting == Hosting::kYes);
         CHECK(c.agent.rdzv.server_host == "127.0.0.1");
         CHECK(c.agent.rdzv.server_port == 0);
         CHECK(c.agent.rdzv.job.static_node_ranks);
       }},
      {"--nnodes 2 --node_rank 1 --master_addr 10.0.0.1 --master_port 29500 --nproc_per_node 4 train.py", {}, "",
       [](C c) {
         CHECK(*c.agent.rdzv.node_rank == 1);
         CHECK(c.agent.rdzv.hosting == Hosting::kNo);
         CHECK(c.agent.world.master_addr == "10.0.0.1");
         CHECK(c.agent.world.master_port == 29500);
       }},
      {"--nnodes 2 --node-rank 1 --rdzv-backend static --rdzv-endpoint 10.0.0.9:29501 train.py", {}, "",
       [](C c) {  // torchrun's static backend: the endpoint is node 0's, ranks as given
         CHECK(c.agent.rdzv.job.static_node_ranks);
         CHECK(*c.agent.rdzv.node_rank == 1);
         CHECK(c.agent.rdzv.server_host == "10.0.0.9");
         CHECK(c.agent.rdzv.server_port == 29501);
       }},
      {"--max-restarts 3 --monitor-interval 1 --role trainer train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.job.max_restarts == 3);
         CHECK(c.agent.world.role == "trainer");
       }},
      {"--max_restarts=2 --monitor_interval=0.1 -m mypkg.train --epochs 1", {}, "",
       [](C c) { CHECK(c.agent.argv == std::vector<std::string>{"python3", "-u", "-m", "mypkg.train", "--epochs", "1"}); }},
      {"--module json.tool", {}, "", [](C c) { CHECK(c.agent.argv[2] == "-m"); }},
      {"--no-python true x", {}, "", [](C c) { CHECK(c.agent.argv == std::vector<std::string>{"true", "x"}); }},
      {"--no_python --nproc-per-node 2 sh -c true", {}, "", [](C c) { CHECK(c.agent.argv[0] == "sh"); }},
      {"--log-dir /tmp -r 3 -t 0:3 --nproc-per-node 2 train.py", {}, "",
       [](C c) {
         CHECK(c.agent.log_dir == "/tmp");
         CHECK(c.agent.output.redirects.all == 3);
         CHECK(c.agent.output.tee.mask_for(0) == 3);
       }},
      {"--log_dir=/tmp --redirects=1 --tee=2 train.py", {}, "", [](C c) { CHECK(c.agent.output.tee.all == 2); }},
      {"--nproc-per-node 4 --local-ranks-filter 0 train.py", {}, "",
       [](C c) { CHECK(c.agent.output.console_local_ranks == std::vector<int>{0}); }},
      {"--local_ranks_filter=0,2 --nproc_per_node=4 train.py", {}, "",
       [](C c) { CHECK(c.agent.output.console_local_ranks.size() == 2); }},
      // Issue 53: torchrun's etcd-v2 spellings (etcd_rendezvous_backend.py) and its etcd backend's etcd_prefix.
      {"--rdzv-backend etcd-v2 --rdzv-endpoint h:2379 --rdzv-id j --nnodes 2 --rdzv-conf "
       "protocol=https,ca_cert=/etc/hostname,ssl_cert=/etc/passwd,ssl_cert_key=/etc/group,key_prefix=/x train.py",
       {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.etcd.cacert == "/etc/hostname");
         CHECK(c.agent.rdzv.etcd.cert == "/etc/passwd");
         CHECK(c.agent.rdzv.etcd.key == "/etc/group");
         CHECK(c.agent.rdzv.etcd.key_prefix == "/x");
       }},
      {"--rdzv-backend etcd --rdzv-endpoint h:2379 --rdzv-id j --nnodes 2 --rdzv-conf etcd_prefix=/torchelastic/p2p "
       "train.py", {}, "", [](C c) { CHECK(c.agent.rdzv.etcd.key_prefix == "/torchelastic/p2p"); }},
      {"--nnodes 2 --rdzv-endpoint 10.0.0.2:1234 --rdzv-id j --local-addr 10.0.0.3 train.py", {}, "",
       [](C c) { CHECK(c.agent.rdzv.local_addr == "10.0.0.3"); }},
      {"--nproc-per-node gpu train.py", {"CUDA_VISIBLE_DEVICES=0,1"}, "",
       [](C c) { CHECK(c.agent.world.local_world_size == 2); }},
      {"--nproc-per-node auto train.py", {"CUDA_VISIBLE_DEVICES="}, "",
       [](C c) { CHECK(has_note(c, "--nproc-per-node auto: no CUDA device visible")); }},
      {"--nproc-per-node cpu train.py", {}, "", [](C c) { CHECK(c.agent.world.local_world_size >= 1); }},
      // --- accepted: torchrun options ddprun does not need ---
      {"--start-method spawn train.py", {}, "", [](C c) { CHECK(has_note(c, "debug: --start-method spawn")); }},
      {"--start_method=fork train.py", {}, "", [](C c) { CHECK(has_note(c, "debug: --start-method fork")); }},
      {"--start-method forkserver train.py", {}, "", nullptr},
      {"--signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 train.py", {}, "",
       [](C c) { CHECK(has_note(c, "debug: --signals-to-handle")); }},
      {"--event-log-handler null train.py", {}, "", nullptr},
      {"--shutdown-timeout 10 train.py", {}, "", [](C c) { CHECK(c.agent.term_timeout.count() == 10000); }},
      {"--run-path train.py", {}, "", [](C c) { CHECK(c.agent.argv[2] == train_py()); }},
      {"--run-path --no-python train.py", {}, "", [](C c) { CHECK(c.agent.argv[0] == "python3"); }},
      // torch.distributed.launch
      {"--use-env --nproc_per_node=2 --nnodes=1 --node_rank=0 --master_addr=127.0.0.1 train.py", {}, "",
       [](C c) { CHECK(has_note(c, "debug: --use-env")); }},
      {"--use_env --nproc_per_node 2 train.py", {}, "", nullptr},
      // --- --rdzv-conf ---
      {"--nnodes 2 --rdzv-endpoint h:29400 --rdzv-id j --rdzv-conf join_timeout=600,read_timeout=300 train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.job.join_timeout.count() == 600000);
         CHECK(has_note(c, "debug: --rdzv-conf read_timeout ignored"));
       }},
      {"--rdzv_conf=timeout=1200,last_call_timeout=30 train.py", {}, "",
       [](C c) { CHECK(c.agent.rdzv.job.join_timeout.count() == 1200000); }},
      // elastic: torchrun's MIN:MAX with its last call
      {"--nnodes 1:4 --rdzv-endpoint h:29400 --rdzv-id j --rdzv-conf last_call_timeout=2.5 train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.job.min_nodes == 1);
         CHECK(c.agent.rdzv.job.max_nodes == 4);
         CHECK(c.agent.rdzv.job.last_call.count() == 2500);
         CHECK_FALSE(c.agent.rdzv.job.static_node_ranks);
       }},
      {"--nnodes 2:3 --rdzv-endpoint h:29400 --rdzv-id j train.py", {"PET_NNODES=1:9"}, "",
       [](C c) { CHECK(c.agent.rdzv.job.min_nodes == 2); }},  // the command line wins over PET_NNODES
      {"--rdzv-conf timeout=5 --rdzv-timeout 7 train.py", {}, "",
       [](C c) { CHECK(c.agent.rdzv.job.join_timeout.count() == 7000); }},  // ddprun's own option wins
      {"--nnodes 2 --rdzv-endpoint h --rdzv-id j --rdzv-conf is_host=true train.py", {}, "",
       [](C c) { CHECK(c.agent.rdzv.hosting == Hosting::kYes); }},
      {"--nnodes 2 --rdzv-endpoint h --rdzv-id j --rdzv-conf is_host=False train.py", {}, "",
       [](C c) { CHECK(c.agent.rdzv.hosting == Hosting::kNo); }},
      {"--rdzv-conf keep_alive_interval=2,keep_alive_max_attempt=4 train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.job.heartbeat_interval.count() == 2000);
         CHECK(c.agent.rdzv.job.heartbeat_timeout.count() == 8000);
       }},
      // ddprun's own: when an elastic job places a late joiner (rendezvous/job_config.hpp JoinPolicy)
      {"--nnodes 1:4 --rdzv-endpoint h --rdzv-id j --rdzv-conf join_policy=at_failure train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.job.join_policy == ddprun::rendezvous::JoinPolicy::kAtFailure);
         CHECK(c.agent.rdzv.job.join_min_interval.count() == 0);
       }},
      {"--nnodes 1:4 --rdzv-endpoint h --rdzv-id j --rdzv-conf join_policy=now,join_min_interval=90 train.py", {}, "",
       [](C c) {
         CHECK(c.agent.rdzv.job.join_policy == ddprun::rendezvous::JoinPolicy::kNow);
         CHECK(c.agent.rdzv.job.join_min_interval.count() == 90000);
       }},
      {"--nnodes 1:4 --rdzv-endpoint h --rdzv-id j train.py", {}, "",
       [](C c) { CHECK(c.agent.rdzv.job.join_policy == ddprun::rendezvous::JoinPolicy::kNow); }},  // the default
      // --- argparse prefixes ---
      {"--nproc 2 train.py", {}, "", [](C c) { CHECK(c.agent.world.local_world_size == 2); }},
      {"--nproc_per=3 train.py", {}, "", [](C c) { CHECK(c.agent.world.local_world_size == 3); }},
      {"--standa --max-r 1 train.py", {}, "", [](C c) { CHECK(c.agent.rdzv.job.max_restarts == 1); }},
      {"--nn 1 --node_r 0 train.py", {}, "", nullptr},
      // --- PET_* variables (Kubeflow PyTorchJob) ---
      {"train.py",
       {"PET_NPROC_PER_NODE=3", "PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_ADDR=pod-0", "PET_MASTER_PORT=23456"},
       "",
       [](C c) {
         CHECK(c.agent.world.local_world_size == 3);
         CHECK(c.agent.rdzv.job.max_nodes == 2);
         CHECK(*c.agent.rdzv.node_rank == 1);
         CHECK(c.agent.world.master_addr == "pod-0");
         CHECK(c.agent.world.master_port == 23456);
       }},
      {"train.py",
       {"PET_NNODES=2", "PET_RDZV_BACKEND=c10d", "PET_RDZV_ENDPOINT=job-master:29400", "PET_RDZV_ID=job",
        "PET_MAX_RESTARTS=2", "PET_RDZV_CONF=join_timeout=60"},
       "",
       [](C c) {
         CHECK(c.agent.rdzv.server_host == "job-master");
         CHECK(c.agent.world.run_id == "job");
         CHECK(c.agent.rdzv.job.max_restarts == 2);
         CHECK(c.agent.rdzv.job.join_timeout.count() == 60000);
       }},
      {"train.py", {"PET_NNODES=2", "PET_NODE_RANK=1", "PET_RDZV_ENDPOINT=m:29400", "PET_RDZV_ID=j"}, "",
       [](C c) {  // as torchrun's c10d backend, a pod's node rank is ignored when the server assigns them
         CHECK(!c.agent.rdzv.job.static_node_ranks);
         CHECK(has_note(c, "debug: PET_NODE_RANK ignored"));
       }},
      {"--nproc-per-node 2 train.py", {"PET_NPROC_PER_NODE=5"}, "",  // the command line wins
       [](C c) { CHECK(c.agent.world.local_world_size == 2); }},
      {"--nproc 2 train.py", {"PET_NPROC_PER_NODE=5"}, "", [](C c) { CHECK(c.agent.world.local_world_size == 2); }},
      {"json.tool", {"PET_MODULE=1", "PET_STANDALONE=0"}, "", [](C c) { CHECK(c.agent.argv[2] == "-m"); }},
      {"train.py", {"PET_SHUTDOWN_TIMEOUT=4"}, "", [](C c) { CHECK(c.agent.term_timeout.count() == 4000); }},
      {"train.py", {"PET_NPROC_PER_NODE="}, "", [](C c) { CHECK(c.agent.world.local_world_size == 1); }},
      // --- refused ---
      {"--logs-specs my_specs train.py", {}, "torchrun's --logs-specs is not supported by ddprun", nullptr},
      {"--logs_specs=x train.py", {}, "--log-dir", nullptr},
      {"--numa-binding node train.py", {}, "torchrun's --numa-binding is not supported", nullptr},
      {"--virtual-local-rank train.py", {}, "torchrun's --virtual-local-rank is not supported", nullptr},
      {"--duplicate-stdout-filters a,b train.py", {}, "torchrun's --duplicate-stdout-filters is not supported", nullptr},
      {"--event-log-handler console train.py", {}, "--events-file", nullptr},
      {"--signals-to-handle SIGTERM,SIGALRM train.py", {}, "signals-to-handle SIGALRM is not supported", nullptr},
      {"--start-method thread train.py", {}, "expected spawn, fork or forkserver", nullptr},
      {"--rdzv-conf store_type=file train.py", {}, "--rdzv-conf key 'store_type' is not supported", nullptr},
      {"--rdzv-backend etcd-v2 --rdzv-endpoint h:2379 --rdzv-id j --nnodes 2 --rdzv-conf ssl_cert=/etc/passwd "
       "train.py", {}, "cacert, cert and key are for TLS: add protocol=https", nullptr},
      {"--rdzv-conf join_timeout train.py", {}, "KEY=VALUE", nullptr},
      {"--rdzv-conf is_host=maybe train.py", {}, "is_host", nullptr},
      {"--rdzv-conf join_policy=later train.py", {}, "--rdzv-conf join_policy 'later': expected now or at_failure",
       nullptr},
      {"--rdzv-conf join_min_interval=soon train.py", {}, "--rdzv-conf join_min_interval", nullptr},
      {"--nnodes 1:4 --rdzv-endpoint h --rdzv-id j --rdzv-conf join_policy=at_failure,join_min_interval=5 train.py", {},
       "join_min_interval applies to join_policy now", nullptr},
      {"--rdzv-backend zookeeper --rdzv-endpoint h:2181 --rdzv-id j --nnodes 2 train.py", {}, "--rdzv-backend", nullptr},
      {"--rdzv-backend etcd --rdzv-endpoint h:2379 --rdzv-id j --nnodes 2 --rdzv-conf cacert=/ca.pem train.py", {},
       "cacert, cert and key are for TLS: add protocol=https", nullptr},
      {"--nnodes 1:4 --master-addr h train.py", {}, "an elastic node count needs --rdzv-endpoint", nullptr},
      {"--nnodes 2 --rdzv-endpoint localhost:0 --rdzv-id j train.py", {}, "port 0 means a free port", nullptr},
      {"--nproc-per-node gpu train.py", {"CUDA_VISIBLE_DEVICES="}, "--nproc-per-node gpu: no CUDA device visible",
       nullptr},
      {"--nproc-per-node xpu train.py", {}, "CUDA devices only", nullptr},
      {"--standalone --rdzv-endpoint h:1 train.py", {}, "--standalone", nullptr},
      {"-m --run-path x", {}, "contradict", nullptr},
      {"--nproc-per-nodes 2 train.py", {}, "did you mean --nproc-per-node?", nullptr},
      {"--rdzv_endpiont h:1 train.py", {}, "did you mean --rdzv-endpoint?", nullptr},
      {"--nnods 2 train.py", {}, "did you mean --nnodes?", nullptr},  // "--nnode" is a prefix: accepted
      {"--rdzv 2 train.py", {}, "ambiguous option --rdzv: it could be --rdzv-endpoint, --rdzv-id", nullptr},
      {"--no-p train.py", {}, "--no-python, --no-prefix", nullptr},
      {"--lo x train.py", {}, "ambiguous option --lo", nullptr},
      {"train.py", {"PET_NNODES=two"}, "(set by PET_NNODES)", nullptr},
      {"train.py", {"PET_STANDALONE=yes"}, "PET_STANDALONE must be 0 or 1", nullptr},
      {"train.py", {"PET_VIRTUAL_LOCAL_RANK=1"}, "(set by PET_VIRTUAL_LOCAL_RANK)", nullptr},
  };
  return table;
}

}  // namespace

TEST_CASE("torchrun command lines: each accepted with torchrun's meaning, or refused with one line and 64") {
  int accepted = 0, refused = 0;
  for (const Verdict& v : verdicts()) {
    CAPTURE(v.line);
    std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
    env.insert(env.end(), v.env.begin(), v.env.end());
    if (v.refusal.empty()) {
      CommandLine c;
      REQUIRE_NOTHROW(c = parse_command_line(words(v.line), env));
      if (v.check) v.check(c);
      ++accepted;
      continue;
    }
    try {
      parse_command_line(words(v.line), env);
      FAIL("accepted, expected a refusal containing: " << v.refusal);
    } catch (const UsageError& e) {
      const std::string what = e.what();
      CHECK(e.exit_code() == kExitUsage);
      CHECK_MESSAGE(what.find(v.refusal) != std::string::npos, what);
      CHECK(what.find('\n') == std::string::npos);
    }
    ++refused;
  }
  MESSAGE("verdicts: " << accepted << " accepted, " << refused << " refused");
}

TEST_CASE("worker arguments are never matched as options, prefixes or not") {
  const auto c = parse_command_line({"--nproc", "2", "true", "--nproc", "--rdzv", "--bogus"}, {"PATH=/usr/bin:/bin"});
  CHECK(c.agent.argv == std::vector<std::string>{"true", "--nproc", "--rdzv", "--bogus"});
  const auto d = parse_command_line({"--", "true", "--x"}, {"PATH=/usr/bin:/bin"});
  CHECK(d.agent.argv == std::vector<std::string>{"true", "--x"});
}

TEST_CASE("short options: -r3, -r 3 and unknown letters") {
  const auto c = parse_command_line({"--log-dir", "/tmp", "-r3", "-t", "1", "true"}, {"PATH=/usr/bin:/bin"});
  CHECK(c.agent.output.redirects.all == 3);
  CHECK(c.agent.output.tee.all == 1);
  CHECK_THROWS_WITH_AS(parse_command_line({"-x", "true"}, {"PATH=/usr/bin:/bin"}),
                       doctest::Contains("unknown option -x"), UsageError);
}

TEST_CASE("edit distance") {
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("nnode", "nnodes") == 1);
  CHECK(edit_distance("rdzv-endpiont", "rdzv-endpoint") == 2);
  CHECK(edit_distance("same", "same") == 0);
}
