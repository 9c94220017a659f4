#include "launcher/torchrun_compat.hpp"

#include <cctype>

#include "common/contract/worker_contract.hpp"
#include "common/error.hpp"
#include "launcher/exit_codes.hpp"
#include "launcher/option_values.hpp"
#include "rendezvous/job_config.hpp"

namespace ddprun::launcher {
namespace {

[[noreturn]] void usage(const std::string& message) { throw UsageError(message, kExitUsage); }

std::string not_supported(const std::string& option, const std::string& why) {
  return "torchrun's --" + option + " is not supported by ddprun: " + why;
}

// torchrun's options that read PET_<DEST>: torchrun's name (its first long spelling) → ddprun's canonical
// name, and whether it is a flag. --logs-specs and --numa-binding have no variable in torchrun.
struct PetOption {
  const char* torchrun;
  const char* ddprun;
  bool flag;
};
constexpr PetOption kPetOptions[] = {
    {"nnodes", "nnodes", false},
    {"nproc-per-node", "nproc-per-node", false},
    {"rdzv-backend", "rdzv-backend", false},
    {"rdzv-endpoint", "rdzv-endpoint", false},
    {"rdzv-id", "rdzv-id", false},
    {"rdzv-conf", "rdzv-conf", false},
    {"standalone", "standalone", true},
    {"max-restarts", "max-restarts", false},
    {"monitor-interval", "monitor-interval", false},
    {"start-method", "start-method", false},
    {"event-log-handler", "event-log-handler", false},
    {"role", "role", false},
    {"module", "module", true},
    {"no-python", "no-python", true},
    {"run-path", "run-path", true},
    {"log-dir", "log-dir", false},
    {"redirects", "redirects", false},
    {"tee", "tee", false},
    {"local-ranks-filter", "local-ranks-filter", false},
    {"duplicate-stdout-filters", "duplicate-stdout-filters", false},
    {"duplicate-stderr-filters", "duplicate-stderr-filters", false},
    {"node-rank", "node-rank", false},
    {"master-addr", "master-addr", false},
    {"master-port", "master-port", false},
    {"local-addr", "local-addr", false},
    {"signals-to-handle", "signals-to-handle", false},
    {"shutdown-timeout", "term-timeout", false},
    {"virtual-local-rank", "virtual-local-rank", true},
};

std::string pet_name(const std::string& option) {
  std::string name = "PET_";
  for (char c : option) name.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return name;
}

OptionNames refused(const std::string& name, bool takes_value, const std::string& why) {
  std::string snake = name;
  for (char& c : snake) c = c == '-' ? '_' : c;
  return OptionNames{name, {name, snake}, "", takes_value, not_supported(name, why)};
}

}  // namespace

std::vector<OptionNames> refused_torchrun_options() {
  return {
      refused("logs-specs", true,
              "it names a Python LogsSpecs plug-in; ddprun keeps per-rank logs with --log-dir DIR, choosing the "
              "streams with -r/--redirects and -t/--tee (and the console's ranks with --local-ranks-filter)"),
      refused("numa-binding", true,
              "bind CPUs outside ddprun (srun --cpu-bind, or --no-python numactl ... python3 train.py)"),
      refused("virtual-local-rank", false,
              "every worker sees all visible GPUs; select yours with torch.cuda.set_device(LOCAL_RANK)"),
      refused("duplicate-stdout-filters", true,
              "keep full logs with --log-dir DIR --tee 3 and filter them (grep) instead"),
      refused("duplicate-stderr-filters", true,
              "keep full logs with --log-dir DIR --tee 3 and filter them (grep) instead"),
  };
}

std::vector<std::string> options_from_pet_env(const std::vector<std::string>& env, const std::set<std::string>& given,
                                              std::vector<std::pair<std::string, std::string>>& sources) {
  const std::vector<OptionNames> refusals = refused_torchrun_options();
  std::vector<std::string> words;
  for (const PetOption& p : kPetOptions) {
    const std::string var = pet_name(p.torchrun);
    const std::string value = contract::env_value(env, var, "");
    if (value.empty() || given.count(p.ddprun)) continue;  // unset, or the command line wins
    int on = 0;
    if (p.flag && !parse_int_strict(value, on))
      usage(var + " must be 0 or 1 (torchrun's --" + p.torchrun + " flag), got '" + value + "'");
    if (p.flag && on == 0) continue;
    for (const OptionNames& r : refusals)
      if (r.canonical == p.ddprun) usage(r.refusal + " (set by " + var + ")");
    words.push_back("--" + std::string(p.ddprun) + (p.flag ? "" : "=" + value));
    sources.emplace_back(p.ddprun, var);
  }
  return words;
}

void apply_rdzv_conf(const std::string& text, const std::set<std::string>& given, TopologyOptions& o,
                     std::vector<std::string>& notes) {
  if (text.empty()) return;
  std::string keep_alive_attempts;
  for (const std::string& item : split_on(text, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      usage("--rdzv-conf '" + text + "': expected KEY=VALUE,KEY=VALUE, e.g. join_timeout=600");
    const std::string given_key = item.substr(0, eq), value = item.substr(eq + 1);
    const std::string option = "--rdzv-conf " + given_key;
    // torchrun's two etcd backends name the same settings apart: etcd-v2 (etcd_rendezvous_backend.py) ca_cert,
    // ssl_cert, ssl_cert_key, key_prefix; etcd (etcd_rendezvous.py) cacert, cert, key, etcd_prefix. Either
    // spelling under either backend (issue 53: etcd-v2's were refused with 64).
    const std::string key = given_key == "ca_cert"        ? "cacert"
                            : given_key == "ssl_cert"     ? "cert"
                            : given_key == "ssl_cert_key" ? "key"
                            : given_key == "etcd_prefix"  ? "key_prefix"
                                                          : given_key;
    if (key == "timeout" || key == "join_timeout") {
      parse_duration(option, value);
      if (!given.count("rdzv-timeout")) o.rdzv_timeout = value;
    } else if (key == "keep_alive_interval") {
      parse_duration(option, value);
      if (!given.count("heartbeat-interval")) o.heartbeat_interval = value;
    } else if (key == "keep_alive_max_attempt") {
      parse_int_in(option, value, 2, 1000);  // 1 would make the timeout the interval itself
      keep_alive_attempts = value;
    } else if (key == "is_host") {
      // torch reads it with RendezvousParameters.get_as_bool.
      if (value == "1" || value == "true" || value == "True" || value == "yes") o.is_host = true;
      else if (value == "0" || value == "false" || value == "False" || value == "no") o.is_host = false;
      else usage(option + " '" + value + "': expected true or false");
    } else if (key == "last_call_timeout") {
      parse_duration(option, value);
      o.last_call = value;
    } else if (key == "max_departures") {  // ddprun's own: elastic jobs' flapping bound (docs/MULTINODE.md)
      parse_int_in(option, value, 1, 1000000);
      o.max_departures = value;
    } else if (key == "join_policy") {  // ddprun's own: when an elastic job places a late joiner
      rendezvous::JoinPolicy policy;
      if (!rendezvous::parse_join_policy(value, policy))
        usage(option + " '" + value + "': expected " + rendezvous::kJoinPolicyValues);
      o.join_policy = value;
    } else if (key == "join_min_interval") {  // ddprun's own: with join_policy now, the least a round runs
      parse_duration(option, value);
      o.join_min_interval = value;
    } else if (key == "read_timeout") {
      parse_duration(option, value);
      if (is_etcd_backend(o.rdzv_backend)) o.etcd_read_timeout = value;
      else
        notes.push_back("debug: --rdzv-conf read_timeout ignored: ddprun's agents notice a silent server by its "
                        "heartbeats (--heartbeat-timeout)");
    } else if (key == "key_prefix" && is_etcd_backend(o.rdzv_backend)) {
      if (value.empty() || value.front() != '/')
        usage(option + " '" + value + "': expected an etcd key path beginning with '/', e.g. /ddprun");
      o.etcd_key_prefix = value;
    } else if (key == "protocol" && is_etcd_backend(o.rdzv_backend)) {
      if (value != "http" && value != "https") usage(option + " '" + value + "': expected http or https");
      o.etcd_protocol = value;
    } else if ((key == "cacert" || key == "cert" || key == "key") && is_etcd_backend(o.rdzv_backend)) {
      if (value.empty()) usage(option + ": expected a PEM file");
      (key == "cacert" ? o.etcd_cacert : key == "cert" ? o.etcd_cert : o.etcd_key) = value;
    } else {
      usage("--rdzv-conf key '" + given_key + "' is not supported by ddprun: it understands timeout, join_timeout, "
            "last_call_timeout, read_timeout, is_host, keep_alive_interval, keep_alive_max_attempt, (with etcd) "
            "key_prefix or etcd_prefix, protocol, cacert or ca_cert, cert or ssl_cert, key or ssl_cert_key, and (its "
            "own) max_departures, join_policy, join_min_interval");
    }
  }
  // torch: a node is lost after keep_alive_max_attempt missed keep-alives (default 3).
  if (!keep_alive_attempts.empty() && !given.count("heartbeat-timeout")) {
    int attempts = 0;
    parse_int_strict(keep_alive_attempts, attempts);
    const double interval_s = parse_duration("--heartbeat-interval", o.heartbeat_interval).count() / 1000.0;
    o.heartbeat_timeout = std::to_string(interval_s * attempts);
  }
}

void check_start_method(const std::string& value, std::vector<std::string>& notes) {
  if (value.empty()) return;
  if (value != "spawn" && value != "fork" && value != "forkserver")
    usage("--start-method '" + value + "': expected spawn, fork or forkserver");
  notes.push_back("debug: --start-method " + value + " ignored: ddprun starts every worker as a fresh process "
                  "(fork and exec), whatever the method");
}

void check_signals_to_handle(const std::string& value, std::vector<std::string>& notes) {
  if (value.empty()) return;
  for (const std::string& name : split_on(value, ',')) {
    if (name != "SIGTERM" && name != "SIGINT" && name != "SIGHUP" && name != "SIGQUIT" && name != "SIGUSR1" &&
        name != "SIGUSR2")
      usage(not_supported("signals-to-handle " + name,
                          "ddprun handles SIGTERM, SIGINT, SIGHUP and SIGQUIT and forwards SIGUSR1 and SIGUSR2, "
                          "always"));
  }
  notes.push_back("debug: --signals-to-handle ignored: ddprun always handles SIGTERM, SIGINT, SIGHUP, SIGQUIT "
                  "and forwards SIGUSR1, SIGUSR2");
}

std::string local_rank_arg_name(const std::string& value, bool use_env, bool launch_style,
                                std::vector<std::string>& notes) {
  if (value == "none") return {};
  if (!value.empty()) {
    if (value != "dash" && value != "underscore")
      usage("--local-rank-arg '" + value + "': expected dash (--local-rank=N), underscore (--local_rank=N) or "
            "none");
    if (use_env)
      usage("--local-rank-arg and --use-env contradict each other: --use-env told torch.distributed.launch not "
            "to pass --local-rank; drop one of them");
    return value == "dash" ? "--local-rank" : "--local_rank";
  }
  if (!launch_style || use_env) return {};
  notes.push_back("ddprun-launch: each worker gets --local_rank=<its local rank> after its program, as "
                  "torch.distributed.launch passed it (--use-env or --local-rank-arg none passes nothing, "
                  "--local-rank-arg dash passes --local-rank=N)");
  return "--local_rank";
}

void check_event_log_handler(const std::string& value) {
  if (value.empty() || value == "null") return;
  usage(not_supported("event-log-handler " + value,
                      "it names a Python handler; --events-file PATH writes one JSON line per lifecycle event"));
}

}  // namespace ddprun::launcher
