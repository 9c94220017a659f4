#include "launcher/cli.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <optional>
#include <set>

#include "agent/env_contract.hpp"
#include "common/contract/worker_contract.hpp"
#include "agent/line_framer.hpp"
#include "agent/run_layout.hpp"
#include "common/error.hpp"
#include "common/timeouts.hpp"
#include "common/version.hpp"
#include "launcher/arg_matching.hpp"
#include "launcher/exit_codes.hpp"
#include "launcher/help_text.hpp"
#include "launcher/host_resources.hpp"
#include "launcher/option_values.hpp"
#include "launcher/ports.hpp"
#include "launcher/program.hpp"
#include "launcher/slurm.hpp"
#include "launcher/topology.hpp"
#include "launcher/watch_options.hpp"
#include "launcher/torchrun_compat.hpp"

namespace ddprun::launcher {
namespace {

struct RawOptions {
  std::string nproc = "1";
  TopologyOptions topo;
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  std::string term_timeout = std::to_string(timeouts::kTermTimeout.count() / 1000);
  WatchOptions watch;  // hangs and stragglers (launcher/watch_options.hpp)
  std::string role = "default";
  bool no_python = false;
  bool module = false;
  bool run_path = false;
  std::string monitor_interval;
  // torchrun's (launcher/torchrun_compat.hpp): --rdzv-conf maps to ddprun's options; the others are checked
  // and accepted, with nothing for ddprun to do.
  std::string rdzv_conf;
  std::string start_method;
  std::string signals_to_handle;
  std::string event_log_handler;
  bool use_env = false;
  bool launch_style = false;  // started as ddprun-launch (LineStyle::kLaunch)
  std::string local_rank_arg;  // --local-rank-arg: dash | underscore
  std::string stdin_rank;      // --stdin-rank: a global rank
  std::string events_file;
  std::string metrics_textfile;
  std::string prefix = "[rank{rank}]: ";
  bool no_prefix = false;
  std::string log_level;
  bool verbose = false;
  bool quiet = false;
};

void define_options(CLI::App& app, RawOptions& o) {
  app.add_option("--nproc-per-node,--nproc_per_node", o.nproc,
                 "Workers on this node: a number, or auto|gpu (visible CUDA devices, else CPUs), cpu (CPUs)");
  TopologyOptions& t = o.topo;
  app.add_option("--nnodes", t.nnodes,
                 "Number of nodes (default 1), or MIN:MAX: elastic, with --rdzv-endpoint (docs/MULTINODE.md)");
  app.add_option("--node-rank,--node_rank", t.node_rank,
                 "Rank of this node, 0..nnodes-1 (static jobs; node 0 hosts the rendezvous)");
  app.add_option("--master-addr,--master_addr", t.master_addr,
                 "Node 0's address: static jobs rendezvous there, and it is workers' MASTER_ADDR (default "
                 "127.0.0.1)");
  app.add_option("--master-port,--master_port", t.master_port,
                 "MASTER_PORT given to workers; 0 or unset picks a free port on node 0");
  app.add_flag("--standalone", t.standalone, "Single-node job on this machine, with a free port");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", t.rdzv_endpoint,
                 "HOST[:PORT] of the rendezvous (dynamic node ranks); the machine at HOST hosts it, or a "
                 "ddprun-rendezvous does (default port 29400)");
  app.add_option("--rdzv-id,--rdzv_id", t.rdzv_id, "Job id shared by every node (same as --run-id)");
  app.add_option("--rdzv-backend,--rdzv_backend", t.rdzv_backend,
                 "Accepted for torchrun compatibility: c10d or static (ddprun has one rendezvous)");
  app.add_option("--rdzv-port,--rdzv_port", t.rdzv_port,
                 "Static jobs: the port node 0 hosts the rendezvous on, at --master-addr (default 29400)");
  app.add_option("--rdzv-token,--rdzv_token", t.rdzv_token,
                 "Shared secret every node must prove (never sent); else --rdzv-token-file or DDPRUN_TOKEN");
  app.add_option("--rdzv-token-file,--rdzv_token_file", t.rdzv_token_file, "Read the token from this file");
  app.add_option("--rdzv-auth,--rdzv_auth", t.rdzv_auth,
                 "auto: in a SLURM step, nodes also prove their user with MUNGE when munged answers; munge: "
                 "always, refusing to start without munged; token: the token only (default auto)");
  app.add_option("--rdzv-timeout,--rdzv_timeout", t.rdzv_timeout,
                 "Seconds to wait for every node to join, or for the server to answer (default 900)");
  app.add_option("--join-grace", t.join_grace,
                 "Fixed node count: a place in the rendezvous still empty this long after the last node joined or "
                 "left ends it, and a node that finds no server within twice it gives up (exit 75): the nodes "
                 "start together and none can be replaced (default 5 in a SLURM step, else 0 = off)");
  app.add_option("--heartbeat-interval,--heartbeat_interval", t.heartbeat_interval,
                 "Seconds between heartbeats (set on the node hosting the rendezvous; default 1, longer for jobs of "
                 "over 2 000 nodes, up to a third of --heartbeat-timeout)");
  app.add_option("--heartbeat-timeout,--heartbeat_timeout", t.heartbeat_timeout,
                 "Seconds of silence after which a node, or the server, is lost (host's setting; default 15)");
  app.add_option("--rdzv-reconnect-timeout", t.rdzv_reconnect_timeout,
                 "A lost ddprun-rendezvous: keep the workers and reconnect this long (default 60; 0 = end now)");
  app.add_option("--local-addr,--local_addr", t.local_addr,
                 "How the other nodes reach this one (MASTER_ADDR when this is node 0)");
  app.add_option("--max-restarts,--max_restarts", t.max_restarts,
                 "Restart the whole job (every node) this many times after a worker failure (default 0)");
  app.add_option("--log-dir,--log_dir", o.log_dir,
                 "Keep per-attempt, per-rank logs and error files under this directory");
  app.add_option("-r,--redirects", o.redirects,
                 "Send worker streams to log files only: 0 none, 1 stdout, 2 stderr, 3 both; or per local "
                 "rank, e.g. 0:3,1:1");
  app.add_option("-t,--tee", o.tee, "Copy worker streams to log files as well as the console (same values)");
  app.add_option("--local-ranks-filter,--local_ranks_filter", o.local_ranks_filter,
                 "Show only these local ranks' output on the console, e.g. 0 or 0,2 (log files keep all)");
  app.add_option("--term-timeout,--term_timeout,--shutdown-timeout,--shutdown_timeout", o.term_timeout,
                 "Seconds between SIGTERM and SIGKILL when tearing the job down (default 30)");
  define_watch_options(app, o.watch);
  app.add_option("--run-id,--run_id", t.run_id, "Job id (TORCHELASTIC_RUN_ID; default none)");
  app.add_option("--role", o.role, "Worker role name (ROLE_NAME; default default)");
  app.add_flag("--no-python,--no_python", o.no_python, "Execute PROGRAM directly, even a Python script");
  app.add_flag("-m,--module", o.module, "PROGRAM is a Python module, run as python -m PROGRAM");
  app.add_flag("--run-path,--run_path", o.run_path, "PROGRAM is a Python file, run as python FILE (any name)");
  app.add_option("--monitor-interval,--monitor_interval", o.monitor_interval,
                 "Accepted for torchrun compatibility and ignored: ddprun sees exits as events, not by polling");
  app.add_option("--events-file,--events_file", o.events_file, "Write one JSON line per lifecycle event here");
  app.add_option("--metrics-textfile", o.metrics_textfile,
                 "Write this node's live figures (state, step, step rate, last beat, CPU, RSS per rank; restarts) in "
                 "Prometheus' text format into this directory, for node_exporter's textfile collector "
                 "(docs/MONITORING.md)");
  app.add_option("--stdin-rank,--stdin_rank", o.stdin_rank,
                 "Give ddprun's stdin to this global rank, for pdb/breakpoint() (others read /dev/null)");
  app.add_option("--local-rank-arg,--local_rank_arg", o.local_rank_arg,
                 "dash|underscore|none: pass --local-rank=N (torch 2.x launch), --local_rank=N (1.x) or nothing "
                 "to the script (default: nothing; --local_rank=N started as ddprun-launch, unless --use-env)");
  app.add_option("--prefix", o.prefix,
                 "Console line prefix; {rank} {local_rank} {node_rank} {role} {host} are replaced (default "
                 "'[rank{rank}]: ')");
  app.add_flag("--no-prefix", o.no_prefix, "No prefix on forwarded lines (lines are still never mixed)");
  app.add_option("--log-level", o.log_level, "debug|info|warning|error|off (default info; env DDPRUN_LOG_LEVEL)");
  app.add_flag("-v,--verbose", o.verbose, "Same as --log-level debug");
  app.add_flag("-q,--quiet", o.quiet, "Same as --log-level warning");
  const std::string compat = "torchrun compatibility (docs/TORCHRUN.md)";
  app.add_option("--rdzv-conf,--rdzv_conf", o.rdzv_conf,
                 "torchrun's KEY=VALUE,...: timeout, join_timeout, is_host, keep_alive_interval, "
                 "keep_alive_max_attempt map to ddprun's options")
      ->group(compat);
  app.add_option("--start-method,--start_method", o.start_method,
                 "spawn|fork|forkserver, accepted: every worker is a fresh process")
      ->group(compat);
  app.add_option("--signals-to-handle,--signals_to_handle", o.signals_to_handle,
                 "accepted: SIGTERM, SIGINT, SIGHUP, SIGQUIT are always handled, SIGUSR1/2 forwarded")
      ->group(compat);
  app.add_option("--event-log-handler,--event_log_handler", o.event_log_handler, "only null (see --events-file)")
      ->group(compat);
  app.add_flag("--use-env,--use_env", o.use_env,
               "torch.distributed.launch's: no --local_rank=N for the script (LOCAL_RANK is always in the "
               "environment)")
      ->group(compat);
}

// Every long and short name CLI11 knows, plus the torchrun options ddprun refuses.
std::vector<OptionNames> option_table(const CLI::App& app) {
  std::vector<OptionNames> table;
  for (const CLI::Option* opt : app.get_options()) {
    OptionNames n;
    n.longs = opt->get_lnames();
    if (n.longs.empty()) continue;
    n.canonical = n.longs.front();
    for (const std::string& s : opt->get_snames()) n.shorts += s;
    n.takes_value = opt->get_expected_max() > 0;  // flags expect no value
    table.push_back(std::move(n));
  }
  for (OptionNames& r : refused_torchrun_options()) table.push_back(std::move(r));
  return table;
}

int resolve_nproc(const std::string& text, const std::vector<std::string>& env, std::vector<std::string>& notes) {
  if (text == "auto" || text == "gpu" || text == "cpu") {
    const std::string cvd = contract::env_value(env, "CUDA_VISIBLE_DEVICES", "");
    const bool cvd_set = contract::env_value(env, "CUDA_VISIBLE_DEVICES", "\x01") != "\x01";
    const int gpus = text == "cpu" ? 0 : visible_gpu_count(cvd, cvd_set);
    if (gpus > 0) return gpus;
    // As torchrun: gpu asks for GPUs, so none is an error; auto settles for the CPUs.
    if (text == "gpu")
      throw UsageError("--nproc-per-node gpu: no CUDA device visible" +
                           (cvd_set ? " (CUDA_VISIBLE_DEVICES='" + cvd + "')" : std::string()) +
                           "; give a number, or auto to use the CPUs instead",
                       kExitUsage);
    int cpus = usable_cpu_count();
    // Under SLURM the task's CPUs are SLURM_CPUS_PER_TASK, also where no affinity plugin narrows the mask
    // (issue 34: task/none gave 2 workers for --cpus-per-task 1, 2 or 4 on a 2-CPU node).
    std::string why = "the usable CPUs";
    if (int n = 0; parse_int_strict(contract::env_value(env, "SLURM_CPUS_PER_TASK", ""), n) && n >= 1 && n < cpus) {
      cpus = n;
      why = "SLURM_CPUS_PER_TASK";
    }
    if (text == "auto" || why != "the usable CPUs")
      notes.push_back("--nproc-per-node " + text + ": " + (text == "auto" ? "no CUDA device visible, " : "") +
                      "using " + std::to_string(cpus) + " (" + why + ")");
    return cpus;
  }
  if (text == "xpu")
    throw UsageError("--nproc-per-node xpu: ddprun counts CUDA devices only; give the number of workers",
                     kExitUsage);
  int n = 0;
  if (!parse_int_strict(text, n))  // issue 34: "must be an integer" hid the words it takes as well
    throw UsageError("--nproc-per-node must be a number of workers (1-4096) or one of auto, gpu, cpu; got '" + text +
                         "'",
                     kExitUsage);
  return parse_int_in("--nproc-per-node", text, 1, 4096);
}

LogLevel resolve_log_level(const RawOptions& o, const std::vector<std::string>& env) {
  LogLevel level = LogLevel::kInfo;
  const std::string from_env = contract::env_value(env, "DDPRUN_LOG_LEVEL", "");
  if (!from_env.empty() && !parse_log_level(from_env, level))
    throw UsageError("DDPRUN_LOG_LEVEL must be debug, info, warning, error or off, got '" + from_env + "'",
                     kExitUsage);
  if (!o.log_level.empty() && !parse_log_level(o.log_level, level))
    throw UsageError("--log-level must be debug, info, warning, error or off, got '" + o.log_level + "'",
                     kExitUsage);
  if (o.verbose) level = LogLevel::kDebug;
  if (o.quiet) level = LogLevel::kWarning;
  return level;
}

// This process's executable, "" when /proc does not say.
std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// This node's one name in every report (the rendezvous' hello, root causes, summaries, the events file, the
// {host} output prefix): SLURM's node name where slurmd started ddprun (SLURMD_NODENAME, the name sinfo,
// squeue and scontrol use, which may differ from the machine's hostname), else the hostname.
std::string host_name(const std::vector<std::string>& env) {
  const std::string slurm_node = contract::env_value(env, "SLURMD_NODENAME", "");
  if (valid_host(slurm_node)) return slurm_node;
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// Everything after CLI11 has read the options: values checked and turned into the agent's configuration.
// `given`: options given on the command line or by PET_* variables; `from_env`: those by PET_* only.
void configure(const CLI::App& app, RawOptions& o, const std::set<std::string>& given,
               const std::set<std::string>& from_env, const std::vector<std::string>& env,
               std::vector<std::string> command, CommandLine& result);

}  // namespace

LineStyle line_style_of(const std::string& argv0) {
  const std::size_t slash = argv0.rfind('/');
  return argv0.substr(slash == std::string::npos ? 0 : slash + 1) == "ddprun-launch" ? LineStyle::kLaunch
                                                                                      : LineStyle::kTorchrun;
}

CommandLine parse_command_line(const std::vector<std::string>& args, const std::vector<std::string>& env,
                               LineStyle style) {
  CommandLine result;
  RawOptions o;
  o.launch_style = style == LineStyle::kLaunch;
  CLI::App app{"", "ddprun"};  // the usage line, the summary and the epilog: describe_help
  app.set_version_flag("--version", std::string("ddprun ") + kVersion);
  // Everything from the first positional argument on belongs to the worker's command line.
  app.prefix_command();
  define_options(app, o);
  describe_help(app);

  // argparse's prefixes and torchrun's refusals first, then torchrun's PET_* variables for the options the
  // command line left out, put in front of its words (from the program on, every word is the worker's).
  std::set<std::string> given;
  std::vector<std::string> words = canonical_options(args, option_table(app), given);
  std::vector<std::pair<std::string, std::string>> from_env;
  std::vector<std::string> pet = options_from_pet_env(env, given, from_env);
  words.insert(words.begin(), pet.begin(), pet.end());
  std::set<std::string> env_given;
  for (const auto& [option, var] : from_env) given.insert(option), env_given.insert(option);

  std::vector<std::string> reversed(words.rbegin(), words.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    result.exit_now = true;
    result.text = app.help();
    return result;
  } catch (const CLI::CallForVersion&) {
    result.exit_now = true;
    result.text = std::string("ddprun ") + kVersion + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + " (see ddprun --help)", kExitUsage);
  }
  try {
    configure(app, o, given, env_given, env, app.remaining(), result);
  } catch (const UsageError& e) {
    // A bad value that came from a PET_* variable: say which, as nothing on the command line shows it.
    const std::string what = e.what();
    for (const auto& [option, var] : from_env)
      if (what.find("--" + option) != std::string::npos)
        throw UsageError(what + " (set by " + var + ")", e.exit_code());
    throw;
  }
  return result;
}

namespace {

void configure(const CLI::App& app, RawOptions& o, const std::set<std::string>& given,
               const std::set<std::string>& from_env, const std::vector<std::string>& env,
               std::vector<std::string> command, CommandLine& result) {
  if (!command.empty() && command.front() == "--") command.erase(command.begin());
  if (!command.empty() && command.front().size() > 1 && command.front()[0] == '-')
    throw UsageError("unknown option " + command.front() + " (see ddprun --help)", kExitUsage);
  if (command.empty())
    throw UsageError("no program given: usage is ddprun [OPTIONS] PROGRAM [ARGS...]", kExitUsage);

  check_start_method(o.start_method, result.notes);
  check_signals_to_handle(o.signals_to_handle, result.notes);
  check_event_log_handler(o.event_log_handler);
  if (o.use_env) result.notes.push_back("debug: --use-env: workers always find LOCAL_RANK in their environment");
  apply_rdzv_conf(o.rdzv_conf, given, o.topo, result.notes);
  // torchrun's static backend with an endpoint is node 0's address and rendezvous port, ranks as given.
  if (o.topo.rdzv_backend == "static" && !o.topo.rdzv_endpoint.empty()) {
    std::string host;
    int port = 0;
    parse_endpoint(o.topo.rdzv_endpoint, host, port);
    if (o.topo.master_addr.empty()) o.topo.master_addr = host;
    if (!given.count("rdzv-port")) o.topo.rdzv_port = std::to_string(port);
    o.topo.rdzv_endpoint.clear();
  }

  agent::AgentConfig& cfg = result.agent;
  cfg.log = Logger(resolve_log_level(o, env), "ddprun", slurm_log_node(env));
  cfg.base_env = env;
  cfg.host = host_name(env);

  const int nproc = resolve_nproc(o.nproc, env, result.notes);
  agent::World& w = cfg.world;
  w.local_world_size = nproc;
  // The workers get OMP_NUM_THREADS=1 (agent/env_contract.cpp); torchrun says why it does, and so does ddprun.
  if (nproc > 1 && contract::env_value(env, "OMP_NUM_THREADS", "\x01") == "\x01")
    result.notes.push_back("OMP_NUM_THREADS is unset: each of the " + std::to_string(nproc) +
                           " workers gets OMP_NUM_THREADS=1, so that they do not each run a thread per core of this "
                           "node; set OMP_NUM_THREADS to give them more");
  o.topo.node_rank_given = app.count("--node-rank") > 0;
  // A pod's PET_NODE_RANK beside a dynamic endpoint: torchrun's c10d backend ignores it, and so does ddprun
  // (typed on the command line it is refused: the server assigns node ranks).
  if (from_env.count("node-rank") && !o.topo.rdzv_endpoint.empty()) {
    result.notes.push_back("debug: PET_NODE_RANK ignored: with --rdzv-endpoint the rendezvous assigns node ranks");
    o.topo.node_rank_given = false;
    o.topo.node_rank = "0";
  }
  apply_slurm_topology(o.topo, app.count("--nnodes") > 0, app.count("--rdzv-port") > 0, env, result.notes);
  cfg.step_signals_reach_workers = slurm_signals_reach_workers(env);
  cfg.preemption_exit = !contract::env_value(env, "SLURM_JOB_ID", "").empty();
  cfg.slurm_job_id = contract::env_value(env, "SLURM_JOB_ID", "");
  cfg.slurm_step_nodes =
      contract::env_value(env, "SLURM_STEP_NODELIST", contract::env_value(env, "SLURM_JOB_NODELIST", ""));
  // Ports last (below): picking a MASTER_PORT touches the system.
  w.role = o.role;
  if (!valid_name(w.role))
    throw UsageError("--role must be 1-128 characters of [A-Za-z0-9._-], got '" + o.role + "'", kExitUsage);

  cfg.term_timeout = parse_duration("--term-timeout", o.term_timeout);
  fit_term_timeout_to_kill_wait(given.count("term-timeout") > 0, env, cfg.term_timeout, result.notes);
  apply_watch_options(o.watch, cfg);
  if (!o.monitor_interval.empty()) parse_duration("--monitor-interval", o.monitor_interval);

  cfg.output.prefix_format = o.no_prefix ? std::string() : o.prefix;
  std::string probe;
  if (!agent::expand_prefix(cfg.output.prefix_format, 0, 0, 0, "x", "x", probe))
    throw UsageError("--prefix '" + o.prefix + "': use only {rank}, {local_rank}, {node_rank}, {role} and {host}",
                     kExitUsage);
  cfg.output.redirects = parse_std_streams("--redirects", o.redirects, nproc);
  cfg.output.tee = parse_std_streams("--tee", o.tee, nproc);
  cfg.output.console_local_ranks = parse_rank_list("--local-ranks-filter", o.local_ranks_filter, nproc);

  // The program, exactly as it will be executed; checked now so that a typo starts no worker. One that cannot be
  // run (not found, not executable) on one node of several is said to the others too (below, once the
  // rendezvous is known), instead of leaving them to wait --rdzv-timeout for this node (issue 34).
  std::optional<UsageError> cannot_run;
  try {
    resolve_worker_command(command, o.module, o.no_python, o.run_path, env, cfg, result.notes);
  } catch (const UsageError& e) {
    if (e.exit_code() != kExitNotFound && e.exit_code() != kExitNotExecutable) throw;
    cannot_run = e;
  }
  cfg.local_rank_arg = local_rank_arg_name(o.local_rank_arg, o.use_env, o.launch_style, result.notes);
  cfg.use_env = o.use_env;
  // A Python worker imports the heartbeat helper that came with this ddprun without any set-up of its own.
  if (!cfg.python.empty()) {
    const std::string helpers = python_helper_dir(self_executable());
    cfg.base_env = with_python_path(cfg.base_env, helpers);
    if (!helpers.empty()) result.notes.push_back("debug: ddprun_heartbeat importable from " + helpers);
  }
  if (!o.stdin_rank.empty()) cfg.stdin_rank = parse_int_in("--stdin-rank", o.stdin_rank, 0, 1 << 30);

  // Files and ports last: they touch the system.
  if (!o.log_dir.empty()) {
    const std::string why = agent::check_writable_dir(o.log_dir);
    if (!why.empty()) throw UsageError("--log-dir: " + why, kExitCantCreate);
    cfg.log_dir = o.log_dir;
  } else if (cfg.output.redirects.all || cfg.output.redirects.per_rank_given || cfg.output.tee.all ||
             cfg.output.tee.per_rank_given) {
    throw UsageError("--redirects and --tee write log files: give --log-dir DIR as well", kExitUsage);
  }
  if (!o.metrics_textfile.empty()) {
    // The collector's directory exists already (node_exporter reads it): a missing one is a typo, not made here.
    const std::string why = agent::check_writable_dir(o.metrics_textfile, /*may_be_missing=*/false);
    if (!why.empty()) throw UsageError("--metrics-textfile: " + why, kExitCantCreate);
    cfg.metrics_textfile_dir = o.metrics_textfile;
  }
  if (!o.events_file.empty()) {
    const std::string why = check_writable_file(o.events_file);
    if (!why.empty()) throw UsageError("--events-file: " + why, kExitCantCreate);
    cfg.events_file = o.events_file;
  }
  resolve_topology(o.topo, env, cfg, result.notes);
  if (cannot_run) {
    if (cfg.rdzv.job.max_nodes <= 1) throw *cannot_run;
    cfg.cannot_start = cannot_run->what();
    cfg.cannot_start_code = cannot_run->exit_code();
  }
  if (cfg.stdin_rank >= 0 && cfg.world.nnodes == 1 && cfg.stdin_rank >= nproc)
    throw UsageError("--stdin-rank " + o.stdin_rank + ": the job has ranks 0-" + std::to_string(nproc - 1),
                     kExitUsage);
}

}  // namespace
}  // namespace ddprun::launcher
