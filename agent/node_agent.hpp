// One node's agent: starts the workers, watches them on an Asio loop, tears everything down at the first
// failure or stop signal, forwards output, and reports. Applies agent/supervision_policy.hpp's decisions.
#pragma once

#include <string>

#include "agent/agent_config.hpp"

namespace ddprun::agent {

// Runs the job on this node to the end and returns ddprun's exit code (see README "Exit codes").
// Throws ddprun::SystemError when the run cannot be set up (run directory, events file) — before any
// worker is started.
int run_node_agent(const AgentConfig& config);

// Starts ddprun's console (common/console.hpp) with the agent's high water; run_node_agent does, after the
// job guard's fork. Idempotent.
void start_console();

// Writes "ddprun: <line>" through the console and waits for it to be shown (a stop signal gives up).
void say_and_drain(const std::string& line);

// Blocks the signals the agent answers (stop signals and notices) until run_node_agent listens for them:
// call first thing in main, so that a signal during start-up is answered, not fatal.
void block_job_signals();

}  // namespace ddprun::agent
