// Embedded spawn: a program built on the SDK, started without ddprun, launches its own N workers by
// re-executing itself with the env contract, and supervises them with ddprun's guarantees: any worker
// fails → all are stopped (SIGTERM to each worker's process group, SIGKILL after a grace period), and
// the first failure's exit code is passed on (128+N for signal N). Under ddprun (RANK etc. in the
// environment) the same program just runs as a worker.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "worker_sdk/world.hpp"

namespace ddprun::sdk {

struct SpawnOptions {
  int nproc = 1;
  std::chrono::milliseconds term_timeout{std::chrono::seconds(5)};  // SIGTERM → SIGKILL grace
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port is picked
  std::string program;  // empty: this executable (/proc/self/exe)
};

// Starts options.nproc copies of `argv` (argv[0] included) as ranks 0..nproc-1 of one job and waits.
// Returns the job's exit code: 0 when all exit 0, else the first failure's shell code. SIGINT, SIGTERM,
// SIGHUP and SIGQUIT received meanwhile are passed on to every worker's group as they came (as ddprun and
// torchrun do), then 128+N; a second SIGINT or SIGQUIT SIGKILLs at once. The rules are ddprun's own
// (common/supervision/supervision_policy.hpp), and so is the error file's reader. Throws sdk::Error when a worker
// cannot be started (the ones already started are stopped first).
int spawn_workers(const std::vector<std::string>& argv, const SpawnOptions& options);

// The main of a program that works both ways: with RANK etc. in the environment it runs `worker` with
// the world from the env (exceptions → error file, exit 1); otherwise it spawns options.nproc copies of
// itself and supervises them. Returns the exit code for main to return.
int launch(int argc, char** argv, const SpawnOptions& options, const std::function<int(const WorldInfo&)>& worker);

}  // namespace ddprun::sdk
