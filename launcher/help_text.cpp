#include "launcher/help_text.hpp"

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <string>

#include "launcher/exit_codes.hpp"

namespace ddprun::launcher {
namespace {

constexpr const char* kSummary =
    "Launch and supervise a distributed PyTorch job: one worker per device on each node, with torchrun's "
    "environment; one failure anywhere ends it all.";

// CLI11 prints the description first and "Usage: ddprun [OPTIONS]" after it (it knows no PROGRAM: the
// worker's command line is not a CLI11 positional). One usage line first, as help2man and people expect.
class UsageFirst : public CLI::Formatter {
 public:
  std::string make_description(const CLI::App*) const override { return {}; }
  std::string make_usage(const CLI::App*, std::string) const override {
    return std::string("Usage: ddprun [OPTIONS] PROGRAM [ARGS...]\n") + kSummary + "\n";
  }
};

// Value names by the option's first long name. DIR, FILE and PATH tell the bash completion to complete
// paths; a|b|c lists the words accepted.
const std::map<std::string, std::string>& value_names() {
  static const std::map<std::string, std::string> names = {
      {"nproc-per-node", "N|auto|gpu|cpu"},
      {"nnodes", "N|MIN:MAX"},
      {"node-rank", "N"},
      {"master-addr", "HOST"},
      {"master-port", "PORT"},
      {"rdzv-endpoint", "HOST[:PORT]"},
      {"rdzv-id", "ID"},
      {"rdzv-backend", "c10d|static"},
      {"rdzv-port", "PORT"},
      {"rdzv-token", "TOKEN"},
      {"rdzv-token-file", "FILE"},
      {"rdzv-auth", "auto|munge|token"},
      {"rdzv-timeout", "SEC"},
      {"join-grace", "SEC"},
      {"heartbeat-interval", "SEC"},
      {"heartbeat-timeout", "SEC"},
      {"rdzv-reconnect-timeout", "SEC"},
      {"local-addr", "HOST"},
      {"max-restarts", "N"},
      {"log-dir", "DIR"},
      {"redirects", "SPEC"},
      {"tee", "SPEC"},
      {"local-ranks-filter", "RANKS"},
      {"term-timeout", "SEC"},
      {"hang-timeout", "SEC"},
      {"hang-initial-timeout", "SEC"},
      {"straggler-threshold", "PCT"},
      {"straggler-window", "SEC"},
      {"straggler-action", "name|stop"},
      {"run-id", "ID"},
      {"role", "NAME"},
      {"monitor-interval", "SEC"},
      {"events-file", "FILE"},
      {"metrics-textfile", "DIR"},
      {"stdin-rank", "RANK"},
      {"local-rank-arg", "dash|underscore|none"},
      {"prefix", "FORMAT"},
      {"log-level", "LEVEL"},
      {"rdzv-conf", "KEY=VALUE,..."},
      {"start-method", "METHOD"},
      {"signals-to-handle", "SIGNALS"},
      {"event-log-handler", "NAME"},
  };
  return names;
}

std::string code(int value) { return std::to_string(value); }

std::string epilog() {
  return "Environment:\n"
         "  PET_NPROC_PER_NODE, PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, ...\n"
         "                        torchrun's PET_<OPTION> for any option (as a Kubeflow PyTorchJob sets\n"
         "                        them); the command line wins\n"
         "  DDPRUN_TOKEN          the rendezvous token, when neither --rdzv-token nor --rdzv-token-file\n"
         "                        is given\n"
         "  DDPRUN_LOG_LEVEL      default for --log-level\n"
         "  PYTHON_EXEC           the Python for a script PROGRAM or -m (default python3 on PATH)\n"
         "  CUDA_VISIBLE_DEVICES  the devices --nproc-per-node auto|gpu counts\n"
         "  DDPRUN_MUNGE_SOCKET   munged's socket (default: AuthInfo=socket= of slurm.conf, else\n"
         "                        libmunge's /run/munge/munge.socket.2)\n"
         "  SLURM_*               in a SLURM step: the nodes, this node's rank and the job id; each\n"
         "                        worker's SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS are its own (docs/ENVIRONMENT.md)\n"
         "  TMPDIR                where the run directory goes (default /dev/shm)\n"
         "\n"
         "Exit status:\n"
         "  0 when every worker exited 0; else the root cause's code (N for a worker that exited N,\n"
         "  128+N for a signal N), or one of ddprun's own: " +
         code(kExitUsage) + " bad usage, " + code(kExitNoInput) + " token file unreadable, " +
         code(kExitUnavailable) + " port in use,\n  " + code(kExitSoftware) + " internal error, " +
         code(kExitOsError) + " system refused, " + code(kExitCantCreate) + " log or events file not writable, " +
         code(kExitRdzvLost) + " rendezvous lost,\n  " + code(kExitRdzvTimeout) + " rendezvous timed out, " +
         code(kExitRdzvProtocol) + " protocol broken, " + code(kExitRdzvRefused) + " refused, " +
         code(kExitHung) + " a worker hung (--hang-timeout),\n  " + code(kExitPreempted) +
         " preempted (stopped cleanly; requeue the job), " + code(kExitNotExecutable) +
         " PROGRAM not executable, " + code(kExitNotFound) + " not found.\n"
         "\n"
         "Examples:\n"
         "  $ ddprun --standalone --nproc-per-node 4 train.py --epochs 10\n"
         "  $ ddprun --nnodes 2 --rdzv-endpoint node0 --rdzv-id job7 ./train\n"
         "  $ ddprun-launch --nproc_per_node 2 train.py   # torch.distributed.launch's line: --local_rank=N\n";
}

}  // namespace

void describe_help(CLI::App& app) {
  auto formatter = std::make_shared<UsageFirst>();
  formatter->column_width(32);
  app.formatter(formatter);
  app.footer(epilog());
  const auto& names = value_names();
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() <= 0) continue;  // a flag
    const std::string& name = opt->get_lnames().front();
    const auto it = names.find(name);
    // An option missing from the table says VALUE (tests/launcher/cli_test.cpp catches it).
    opt->type_name(it == names.end() ? std::string("VALUE") : it->second);
  }
}

}  // namespace ddprun::launcher
