#include "launcher/watch_options.hpp"

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "launcher/exit_codes.hpp"
#include "launcher/option_values.hpp"

namespace ddprun::launcher {

void define_watch_options(CLI::App& app, WatchOptions& o) {
  app.add_option("--hang-timeout,--hang_timeout", o.hang_timeout,
                 "Seconds a worker that beat once may stay silent before it is hung: its stacks are saved, "
                 "and it is killed as a failure (README 'Hang detection'; default 0: off)");
  app.add_option("--hang-initial-timeout,--hang_initial_timeout", o.hang_initial_timeout,
                 "Seconds a worker may run before its first heartbeat (stuck in init_process_group, the first "
                 "data load); then hung like after --hang-timeout, which it needs (default 0: off)");
  app.add_option("--straggler-threshold", o.straggler_threshold,
                 "Name a rank a straggler when its work per step (or step time) stays this many percent above "
                 "the other ranks' median (docs/MONITORING.md; default 30; 0: off)");
  app.add_option("--straggler-window", o.straggler_window,
                 "Seconds over which a rank's pace is measured; it is named after half as long past the "
                 "threshold (default 20)");
  app.add_option("--straggler-action", o.straggler_action,
                 "name: a straggler is named only (the default); stop: its rank is killed as a failure, which "
                 "ends the job or, under --max-restarts, restarts it");
}

void apply_watch_options(const WatchOptions& o, agent::AgentConfig& cfg) {
  cfg.hang_timeout = parse_duration("--hang-timeout", o.hang_timeout);
  cfg.hang_initial_timeout = parse_duration("--hang-initial-timeout", o.hang_initial_timeout);
  if (cfg.hang_initial_timeout.count() > 0 && cfg.hang_timeout.count() <= 0)
    throw UsageError("--hang-initial-timeout needs --hang-timeout: the workers must beat (README 'Hang detection')",
                     kExitUsage);
  // The rendezvous judges (rendezvous/straggler_watch.hpp); the agents measure over the window.
  cfg.rdzv.job.stragglers.threshold = parse_int_in("--straggler-threshold", o.straggler_threshold, 0, 10000) / 100.0;
  cfg.straggler_window = parse_duration("--straggler-window", o.straggler_window);
  if (cfg.straggler_window < std::chrono::seconds(2))
    throw UsageError("--straggler-window must be at least 2 seconds (a pace needs several samples)", kExitUsage);
  cfg.rdzv.job.stragglers.persist = cfg.straggler_window / 2;
  if (o.straggler_action != "name" && o.straggler_action != "stop")
    throw UsageError("--straggler-action '" + o.straggler_action + "': expected name or stop", kExitUsage);
  cfg.straggler_stop = o.straggler_action == "stop";
  if (cfg.straggler_stop && cfg.rdzv.job.stragglers.threshold <= 0)
    throw UsageError("--straggler-action stop needs straggler naming: --straggler-threshold above 0", kExitUsage);
}

}  // namespace ddprun::launcher
