// ddprun: a thin main over the launcher library. Parse and validate everything, then run this node's
// agent; the exit code is the job's (see launcher/exit_codes.hpp and the README).
#include <csignal>
#include <iostream>

#include "agent/env_contract.hpp"
#include "common/contract/worker_contract.hpp"
#include "agent/node_agent.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/process/spawn.hpp"
#include "etcd/gateway_client.hpp"
#include "launcher/cli.hpp"
#include "launcher/exit_codes.hpp"

int main(int argc, char** argv) {
  using namespace ddprun;
  // A stop signal that arrives before the agent's handlers exist must not kill ddprun outright (the exit
  // would be a death by signal, not 128+N, and a guard or run directory could be left half made): it is
  // held here and delivered once the agent listens for it (agent::NodeAgent::run unblocks).
  process::remember_inherited_ignores();  // before anything changes a disposition
  agent::block_job_signals();
  const std::vector<std::string> args(argv + 1, argv + argc);
  launcher::CommandLine cmd;
  try {
    cmd = launcher::parse_command_line(args, contract::current_environment(), launcher::line_style_of(argv[0]));
  } catch (const UsageError& e) {
    write_all(2, std::string("ddprun: error: ") + e.what() + "\n");
    return e.exit_code();
  }
  if (cmd.exit_now) {
    std::cout << cmd.text << std::flush;
    return 0;
  }
  // The etcd TLS files used as a request will use them (issue 55: a certificate with another's key ended every agent
  // with "internal error", 70): refused before anything starts, as an unreadable file is.
  if (const auto& etcd = cmd.agent.rdzv.etcd; etcd.https)
    if (const std::string bad = etcd::check_tls({true, etcd.cacert, etcd.cert, etcd.key}); !bad.empty()) {
      write_all(2, "ddprun: error: " + bad + " (a certificate and the key it was made with, PEM)\n");
      return kExitNoInput;
    }
  cmd.agent.startup_notes = cmd.notes;  // said once ddprun's console runs (agent/node_agent.cpp)
  try {
    return agent::run_node_agent(cmd.agent);
  } catch (const CantCreateError& e) {
    agent::say_and_drain(std::string("error: ") + e.what());
    return launcher::kExitCantCreate;
  } catch (const SystemError& e) {
    agent::say_and_drain(std::string("error: ") + e.what());
    return launcher::kExitOsError;
  } catch (const std::exception& e) {
    agent::say_and_drain(std::string("internal error: ") + e.what());
    return launcher::kExitSoftware;
  }
}
