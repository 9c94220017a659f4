#include <doctest/doctest.h>

#include <algorithm>

#include "agent/env_contract.hpp"
#include "common/error.hpp"
#include "launcher/cli.hpp"
#include "launcher/exit_codes.hpp"
#include "launcher/program.hpp"
#include "temp_dir.hpp"

using namespace ddprun::launcher;
using ddprun::UsageError;

namespace {
const std::vector<std::string> kEnv = {"PATH=/usr/bin:/bin"};

CommandLine parse(std::vector<std::string> args) { return parse_command_line(args, kEnv); }

int usage_code(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.exit_code();
  }
  return 0;
}

// The one line a refusal prints, "" when the command line is accepted.
std::string refusal(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    CHECK(e.exit_code() == kExitUsage);
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("both torchrun spellings of an option are accepted") {
  CHECK(parse({"--nproc-per-node", "3", "true"}).agent.world.local_world_size == 3);
  CHECK(parse({"--nproc_per_node=2", "true"}).agent.world.local_world_size == 2);
  CHECK(parse({"--run_id", "abc", "true"}).agent.world.run_id == "abc");
}

TEST_CASE("everything after the program belongs to the worker, options included") {
  const auto c = parse({"--nproc-per-node", "2", "sh", "-c", "echo --nproc-per-node", "--standalone"});
  CHECK(c.agent.argv == std::vector<std::string>{"sh", "-c", "echo --nproc-per-node", "--standalone"});
  CHECK(c.agent.world.local_world_size == 2);
}

TEST_CASE("a .py program runs under python3 -u, -m runs a module, --no-python execs directly") {
  const auto m = parse({"-m", "json.tool", "--help"});
  CHECK(m.agent.argv == std::vector<std::string>{"python3", "-u", "-m", "json.tool", "--help"});
  CHECK(usage_code({"--no-python", "-m", "x"}) == kExitUsage);
  CHECK(usage_code({"missing_script.py"}) == kExitNotFound);
}

TEST_CASE("a file that is not an executable ELF binary or '#!' script runs under Python, as in torchrun") {
  const TempDir temp;
  const auto file = [&](const std::string& name, const std::string& text, mode_t mode) {
    return temp.file(name, text, mode);
  };
  const std::string script = file("train", "print('hi')\n", 0644);
  const std::string no_shebang = file("train_x", "print('hi')\n", 0755);
  const std::string shell = file("run", "#!/bin/sh\necho hi\n", 0755);
  const std::string binary = file("bin", std::string("\x7f" "ELF\x02\x01\x01", 7), 0755);
  const std::string shell_not_executable = file("run_me", "#!/bin/sh\necho hi\n", 0644);
  const auto runs_python = [&](const std::string& path) {
    INFO(path);
    CHECK(parse({path, "--lr", "1"}).agent.argv == std::vector<std::string>{"python3", "-u", path, "--lr", "1"});
  };
  runs_python(script);
  runs_python(no_shebang);
  runs_python(shell_not_executable);
  for (const std::string& program : {shell, binary}) {
    INFO(program);
    const auto c = parse({program, "x"});
    CHECK(c.agent.program == program);
    CHECK(c.agent.argv == std::vector<std::string>{program, "x"});
  }
  // A name that is no file here is a program in PATH; --no-python and -m keep their meaning.
  CHECK(parse({"true"}).agent.argv == std::vector<std::string>{"true"});
  CHECK(usage_code({"--no-python", script}) == kExitNotExecutable);
  CHECK(parse({"--no-python", shell}).agent.argv == std::vector<std::string>{shell});
  CHECK(parse({"-m", "train"}).agent.argv == std::vector<std::string>{"python3", "-u", "-m", "train"});
  // The choice is said at debug level, for whoever wonders why their script met Python.
  const auto notes = parse({script}).notes;
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
    return n.rfind("debug: ", 0) == 0 && n.find("running it with Python") != std::string::npos;
  }));
}

// Issue 54: `#!/usr/bin/env python` on a Debian without python-is-python3 was exit 127 where torchrun runs the
// script; a '#!' Python script found through PATH was executed, PYTHON_EXEC silently ignored.
TEST_CASE("a '#!' Python that does not exist falls back to python3, said; PATH scripts honour PYTHON_EXEC") {
  const TempDir temp;
  const std::string missing = temp.file("train_old", "#!/usr/bin/env python9.99\nprint('hi')\n", 0755);
  const auto c = parse({missing, "--lr", "1"});
  CHECK(c.agent.argv == std::vector<std::string>{"python3", "-u", missing, "--lr", "1"});
  CHECK(c.agent.python_origin == "python3 from PATH: the script's '#!' interpreter is missing");
  CHECK(std::any_of(c.notes.begin(), c.notes.end(), [](const std::string& n) {
    return n.rfind("warning: ", 0) == 0 && n.find("'python9.99' on its '#!' line, which is not found in PATH; "
                                                  "running it with python3 from PATH") != std::string::npos;
  }));
  // PYTHON_EXEC chosen: nothing to fall back from, nothing said.
  const auto chosen = parse_command_line({missing}, {"PATH=/usr/bin:/bin", "PYTHON_EXEC=/usr/bin/python3"});
  CHECK(chosen.agent.argv == std::vector<std::string>{"/usr/bin/python3", "-u", missing});
  CHECK(std::none_of(chosen.notes.begin(), chosen.notes.end(),
                     [](const std::string& n) { return n.find("'#!' line") != std::string::npos; }));

  const std::string tool = temp.file("bin/train-tool", "#!/usr/bin/env python3\nprint('hi')\n", 0755);
  const std::string bin = tool.substr(0, tool.rfind('/'));
  const auto in_path = parse_command_line({"train-tool", "x"}, {"PATH=" + bin + ":/usr/bin:/bin"});
  CHECK(in_path.agent.argv == std::vector<std::string>{"python3", "-u", tool, "x"});
  const auto exec = parse_command_line({"train-tool", "x"}, {"PATH=" + bin + ":/usr/bin:/bin",
                                                             "PYTHON_EXEC=/usr/bin/python3"});
  CHECK(exec.agent.argv == std::vector<std::string>{"/usr/bin/python3", "-u", tool, "x"});
  CHECK(exec.agent.python_origin == "PYTHON_EXEC");
  // A shell script in PATH is still executed as it is.
  temp.file("bin/run-it", "#!/bin/sh\necho hi\n", 0755);
  CHECK(parse_command_line({"run-it"}, {"PATH=" + bin + ":/usr/bin:/bin"}).agent.argv ==
        std::vector<std::string>{"run-it"});
}

TEST_CASE("the Python helpers are found beside the executable and added at the end of PYTHONPATH") {
  const TempDir prefix;
  const std::string helper = prefix.file("share/ddprun/python/ddprun_heartbeat.py", "def beat(step=-1): pass\n");
  const std::string dir = helper.substr(0, helper.rfind('/'));
  const std::string ddprun = prefix.file("bin/ddprun", "", 0755);
  CHECK(python_helper_dir(ddprun) == dir);  // bin/../share/ddprun/python, resolved
  CHECK(python_helper_dir(prefix.file("elsewhere/bin/ddprun", "", 0755)).empty());  // nothing beside this one
  CHECK(python_helper_dir("ddprun").empty());

  using Env = std::vector<std::string>;
  CHECK(with_python_path({"A=1"}, "/h") == Env{"A=1", "PYTHONPATH=/h"});
  CHECK(with_python_path({"PYTHONPATH="}, "/h") == Env{"PYTHONPATH=/h"});
  CHECK(with_python_path({"PYTHONPATH=/mine:/more"}, "/h") == Env{"PYTHONPATH=/mine:/more:/h"});  // the user's first
  CHECK(with_python_path({"PYTHONPATH=/a:/h"}, "/h") == Env{"PYTHONPATH=/a:/h"});  // a nested ddprun adds nothing
  CHECK(with_python_path({"PYTHONPATH=/a", "PYTHONPATH=/b"}, "/h") == Env{"PYTHONPATH=/a:/h", "PYTHONPATH=/b"});
  CHECK(with_python_path({"PYTHONPATH=/a"}, "") == Env{"PYTHONPATH=/a"});
}

TEST_CASE("several workers with OMP_NUM_THREADS unset: one note says they get 1 and why") {
  auto omp_notes = [](const std::vector<std::string>& env, const char* nproc) {
    const auto c = parse_command_line({"--nproc-per-node", nproc, "true"}, env);
    return std::count_if(c.notes.begin(), c.notes.end(),
                         [](const std::string& n) { return n.find("OMP_NUM_THREADS") != std::string::npos; });
  };
  const auto c = parse({"--nproc-per-node", "3", "true"});
  const auto note = std::find_if(c.notes.begin(), c.notes.end(),
                                 [](const std::string& n) { return n.rfind("OMP_NUM_THREADS is unset", 0) == 0; });
  REQUIRE(note != c.notes.end());
  CHECK(note->find("each of the 3 workers gets OMP_NUM_THREADS=1") != std::string::npos);
  CHECK(omp_notes(kEnv, "1") == 0);  // one worker: nothing is set, nothing said
  CHECK(omp_notes({"PATH=/usr/bin:/bin", "OMP_NUM_THREADS=4"}, "2") == 0);  // the user's value is kept
  CHECK(omp_notes({"PATH=/usr/bin:/bin", "OMP_NUM_THREADS="}, "2") == 0);   // set, if empty: kept as well
}

TEST_CASE("master port 0 or unset picks a free port; master addr defaults to loopback") {
  const auto c = parse({"true"});
  CHECK(c.agent.world.master_port > 0);
  CHECK(c.agent.world.master_addr == "127.0.0.1");
}

TEST_CASE("one node hosts an in-process rendezvous on loopback with a generated token") {
  const auto c = parse({"--nproc-per-node", "3", "true"});
  CHECK(c.agent.rdzv.hosting == ddprun::agent::Hosting::kYes);
  CHECK(c.agent.rdzv.bind_address == "127.0.0.1");
  CHECK(c.agent.rdzv.server_port == 0);
  CHECK(c.agent.rdzv.job.token.size() >= 32);
  CHECK(c.agent.rdzv.master_port == c.agent.world.master_port);
}

TEST_CASE("static multi-node: node 0 hosts at --rdzv-port, the others connect to --master-addr") {
  const auto n0 = parse({"--nnodes", "3", "--node-rank", "0", "--master-addr", "10.1.2.3", "--rdzv-port",
                         "29411", "--rdzv-token", "s3cret", "true"});
  CHECK(n0.agent.rdzv.hosting == ddprun::agent::Hosting::kYes);
  CHECK(n0.agent.rdzv.bind_address == "::");  // every address, IPv6 and IPv4 (rendezvous/listener.hpp)
  CHECK(n0.agent.rdzv.server_host == "10.1.2.3");
  CHECK(n0.agent.rdzv.server_port == 29411);
  CHECK(n0.agent.rdzv.local_addr == "10.1.2.3");
  CHECK(n0.agent.rdzv.job.token == "s3cret");
  // A token typed on the command line shows in ps: said as a warning, with the alternatives.
  const bool warned = std::any_of(n0.notes.begin(), n0.notes.end(), [](const std::string& n) {
    return n.rfind("warning: --rdzv-token", 0) == 0 && n.find("--rdzv-token-file") != std::string::npos;
  });
  CHECK(warned);
  CHECK(*n0.agent.rdzv.node_rank == 0);
  const auto n2 = parse({"--nnodes", "3", "--node_rank", "2", "--master_addr", "10.1.2.3", "true"});
  CHECK(n2.agent.rdzv.hosting == ddprun::agent::Hosting::kNo);
  CHECK(n2.agent.rdzv.server_port == 29400);
  CHECK(*n2.agent.rdzv.node_rank == 2);
}

TEST_CASE("dynamic multi-node: the endpoint's machine may host, ranks come from the server") {
  const auto d = parse({"--nnodes", "2", "--rdzv_endpoint", "node7:29555", "--rdzv-id", "job9", "true"});
  CHECK(d.agent.rdzv.hosting == ddprun::agent::Hosting::kIfLocal);
  CHECK(d.agent.rdzv.server_host == "node7");
  CHECK(d.agent.rdzv.server_port == 29555);
  CHECK(!d.agent.rdzv.job.static_node_ranks);
  CHECK(!d.agent.rdzv.node_rank);
  CHECK(d.agent.world.run_id == "job9");
}

TEST_CASE("a fixed rendezvous endpoint needs --rdzv-id for several nodes, not for one (torchrun's default id)") {
  for (const char* one : {"1", "1:1"}) {
    INFO(one);
    const auto c = parse({"--nnodes", one, "--rdzv-endpoint", "127.0.0.1:29555", "true"});
    CHECK(c.agent.world.run_id == "none");
    CHECK(c.agent.rdzv.server_port == 29555);
    CHECK(!c.agent.rdzv.job.static_node_ranks);
  }
  CHECK(parse({"--rdzv-endpoint", "127.0.0.1:29555", "true"}).agent.world.run_id == "none");  // --nnodes 1
  for (const char* several : {"2", "1:2"}) {
    INFO(several);
    const std::string why = refusal({"--nnodes", several, "--rdzv-endpoint", "127.0.0.1:29555", "true"});
    CHECK(why.find("needs --rdzv-id ID") != std::string::npos);
    CHECK(why.find("--nnodes " + std::string(several)) != std::string::npos);
  }
}

TEST_CASE("help and version exit at once") {
  CHECK(parse({"--help"}).exit_now);
  CHECK(parse({"--version"}).text.find("ddprun") == 0);
}

TEST_CASE("help names every value, has one usage line, the environment, the exit status and examples") {
  const std::string help = parse({"--help"}).text;
  CHECK(help.find("Usage: ddprun [OPTIONS] PROGRAM [ARGS...]\n") == 0);
  CHECK(help.find("Usage:", 1) == std::string::npos);
  // CLI11's type names, or the fallback of an option missing from launcher/help_text.cpp's table.
  for (const char* unnamed : {" TEXT", " INT", " UINT", " FLOAT", " VALUE"}) {
    INFO(unnamed);
    CHECK(help.find(unnamed) == std::string::npos);
  }
  for (const char* named : {"--nproc-per-node,--nproc_per_node N|auto|gpu|cpu", "--log-dir,--log_dir DIR",
                            "--rdzv-endpoint,--rdzv_endpoint HOST[:PORT]", "--rdzv-timeout,--rdzv_timeout SEC",
                            "--rdzv-token-file,--rdzv_token_file FILE", "--max-restarts,--max_restarts N"}) {
    INFO(named);
    CHECK(help.find(named) != std::string::npos);
  }
  for (const char* part : {"\nEnvironment:\n", "DDPRUN_TOKEN", "PET_NPROC_PER_NODE", "PYTHON_EXEC",
                           "\nExit status:\n", "64 bad usage", "77 refused", "78 a worker hung", "79 preempted",
                           "\nExamples:\n", "  $ ddprun "}) {
    INFO(part);
    CHECK(help.find(part) != std::string::npos);
  }
}

TEST_CASE("bad input is refused with the documented code") {
  CHECK(usage_code({"--nproc-per-node", "0", "true"}) == kExitUsage);
  CHECK(usage_code({"--nproc-per-node", "-2", "true"}) == kExitUsage);
  CHECK(usage_code({"--nproc-per-node", "two", "true"}) == kExitUsage);
  CHECK(usage_code({}) == kExitUsage);
  CHECK(usage_code({"--bogus", "true"}) == kExitUsage);
  CHECK(usage_code({"--standalone", "--nnodes", "2", "true"}) == kExitUsage);
  CHECK(usage_code({"--master-port", "70000", "true"}) == kExitUsage);
  CHECK(usage_code({"--nnodes", "2", "true"}) == kExitUsage);  // no --master-addr nor --rdzv-endpoint
  CHECK(usage_code({"--nnodes", "2", "--master-addr", "h", "--node-rank", "2", "true"}) == kExitUsage);
  CHECK(usage_code({"--nnodes", "2", "--rdzv-endpoint", "h:1", "true"}) == kExitUsage);  // no --rdzv-id
  CHECK(usage_code({"--rdzv-backend", "etcd", "true"}) == kExitUsage);
  CHECK(usage_code({"no-such-program-xyz"}) == kExitNotFound);
  CHECK(usage_code({"/tmp"}) == kExitNotExecutable);
  CHECK(usage_code({"--term-timeout", "-1", "true"}) == kExitUsage);
  CHECK(usage_code({"--prefix", "{hostname}", "true"}) == kExitUsage);
  CHECK(usage_code({"--tee", "3", "true"}) == kExitUsage);  // log files need --log-dir
}

TEST_CASE("the job-wide rendezvous settings are checked once, by the rendezvous' own rule, and carried whole") {
  // The launcher refuses with the message rendezvous::validate gives (ddprun-rendezvous says the same).
  std::string launcher_says;
  try {
    parse({"--heartbeat-interval", "2", "--heartbeat-timeout", "1", "true"});
  } catch (const UsageError& e) {
    launcher_says = e.what();
    CHECK(e.exit_code() == kExitUsage);
  }
  ddprun::rendezvous::JobConfig job = parse({"true"}).agent.rdzv.job;
  job.heartbeat_interval = std::chrono::seconds(2);
  job.heartbeat_timeout = std::chrono::seconds(1);
  std::string rendezvous_says;
  try {
    ddprun::rendezvous::validate(job);
  } catch (const ddprun::rendezvous::RendezvousError& e) {
    rendezvous_says = e.what();
  }
  CHECK(!rendezvous_says.empty());
  CHECK(launcher_says == rendezvous_says);
  // The value the server gets is the command line's, whole: no field-by-field copy on the way.
  const auto c = parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--rdzv-token", "s3cret",
                        "--max-restarts", "3", "--heartbeat-timeout", "20", "--run-id", "j1", "true"});
  CHECK(c.agent.rdzv.job.max_nodes == 2);
  CHECK(c.agent.rdzv.job.min_nodes == 2);
  CHECK(c.agent.rdzv.job.max_restarts == 3);
  CHECK(c.agent.rdzv.job.heartbeat_timeout == std::chrono::seconds(20));
  CHECK(c.agent.rdzv.job.run_id == "j1");
  CHECK(c.agent.rdzv.job.token == "s3cret");
  CHECK(c.agent.rdzv.job.static_node_ranks);
}

TEST_CASE("--rdzv-reconnect-timeout: how long a lost ddprun-rendezvous is waited for (0 = not at all)") {
  CHECK(parse({"true"}).agent.rdzv.reconnect_timeout == std::chrono::seconds(60));
  CHECK(parse({"--rdzv-reconnect-timeout", "2.5", "true"}).agent.rdzv.reconnect_timeout ==
        std::chrono::milliseconds(2500));
  CHECK(parse({"--rdzv-reconnect-timeout", "0", "true"}).agent.rdzv.reconnect_timeout.count() == 0);
  CHECK(usage_code({"--rdzv-reconnect-timeout", "-1", "true"}) == kExitUsage);
  CHECK(usage_code({"--rdzv-reconnect-timeout", "soon", "true"}) == kExitUsage);
}

TEST_CASE("an option that takes a value does not take the next option as its value (argparse's rule)") {
  const auto contains = [](const std::string& text, const std::string& part) {
    INFO(text);
    CHECK(text.find(part) != std::string::npos);
  };
  // Once this made a directory named "--standalone" and dropped the flag.
  const std::string log_dir = refusal({"--log-dir", "--standalone", "true"});
  contains(log_dir, "--log-dir expects a value, but the next word is the option --standalone");
  contains(log_dir, "--log-dir=VALUE");
  CHECK(log_dir.find('\n') == std::string::npos);
  // A prefix is named with the option it stands for; once this ran the program "1".
  contains(refusal({"--std", "--nproc_per_node", "1", "true"}),
           "--std (--stdin-rank) expects a value, but the next word is the option --nproc_per_node");
  contains(refusal({"-r", "--standalone", "true"}), "-r (--redirects) expects a value");
  contains(refusal({"--log-dir", "/tmp", "-t", "-v", "true"}), "-t (--tee) expects a value");
  contains(refusal({"--master-port", "--", "true"}), "the next word is '--'");
  contains(refusal({"--nproc-per-node"}), "--nproc-per-node expects a value, and nothing follows it");
  // A negative number is a value, as in argparse (no option looks like one): the value's own check refuses it.
  contains(refusal({"--term-timeout", "-1", "true"}), "--term-timeout");
  CHECK(refusal({"--term-timeout", "-1", "true"}).find("expects a value") == std::string::npos);
  CHECK(refusal({"--max-restarts", "-2", "true"}).find("expects a value") == std::string::npos);
  CHECK(refusal({"--monitor-interval", "-.5", "true"}).find("expects a value") == std::string::npos);
  // Glued on with '=' (or to a short option), a value may start with '-'; so may one with a space in it.
  CHECK(parse({"--run-id=-odd-", "true"}).agent.world.run_id == "-odd-");
  CHECK(parse({"--prefix=-{rank}- ", "true"}).agent.output.prefix_format == "-{rank}- ");
  CHECK(parse({"--prefix", "-> {rank} ", "true"}).agent.output.prefix_format == "-> {rank} ");
  contains(refusal({"--log-dir", "/tmp", "-r-1", "true"}), "--redirects");
  CHECK(refusal({"--log-dir", "/tmp", "-r-1", "true"}).find("expects a value") == std::string::npos);
  CHECK(parse({"--role", "-", "true"}).agent.world.role == "-");
}

TEST_CASE("--local_rank=N only from ddprun-launch or --local-rank-arg, never from the script's text (issue 54)") {
  CHECK(line_style_of("ddprun-launch") == LineStyle::kLaunch);
  CHECK(line_style_of("/usr/bin/ddprun-launch") == LineStyle::kLaunch);
  CHECK(line_style_of("/usr/bin/ddprun") == LineStyle::kTorchrun);
  CHECK(line_style_of("ddprun-launcher") == LineStyle::kTorchrun);
  const TempDir temp;  // a script that declares the option: what it declares decides nothing
  const std::string script = temp.file("train.py", "p.add_argument('--local_rank', type=int, required=True)\n", 0644);
  const std::vector<std::string> line = {"--nproc-per-node", "2", script, "--lr", "0.1"};
  // torchrun's line: nothing, whatever the script declares (torchrun never passes it).
  CHECK(parse_command_line(line, kEnv).agent.local_rank_arg.empty());
  // launch's line: torch 1.x's spelling, right after the script, with a note; --use-env: nothing, as launch.
  const CommandLine launch = parse_command_line(line, kEnv, LineStyle::kLaunch);
  CHECK(launch.agent.local_rank_arg == "--local_rank");
  CHECK(launch.agent.argv[launch.agent.local_rank_arg_at - 1] == script);
  CHECK(std::count_if(launch.notes.begin(), launch.notes.end(), [](const std::string& n) {
          return n.find("ddprun-launch: each worker gets --local_rank=<its local rank>") == 0;
        }) == 1);
  std::vector<std::string> use_env = line;
  use_env.insert(use_env.begin(), "--use_env");
  CHECK(parse_command_line(use_env, kEnv, LineStyle::kLaunch).agent.local_rank_arg.empty());
  std::vector<std::string> dash = line;
  dash.insert(dash.begin(), {"--local-rank-arg", "dash"});
  CHECK(parse_command_line(dash, kEnv, LineStyle::kLaunch).agent.local_rank_arg == "--local-rank");
  CHECK(parse_command_line(dash, kEnv).agent.local_rank_arg == "--local-rank");
}
