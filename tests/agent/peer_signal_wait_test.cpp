// The short wait of a stop that another node's signal caused inside a SLURM step (agent/peer_signal_wait.hpp):
// when it applies, that it ends in the stop's outcome after its time, and that a signal (cancel) ends it first.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>

#include "agent/peer_signal_wait.hpp"

using namespace ddprun::agent;
namespace rdzv = ddprun::rendezvous;
using namespace std::chrono_literals;

TEST_CASE("only another node's stop signal, inside a step that signals every process, while workers run") {
  rdzv::Failure stopped;
  stopped.kind = rdzv::FailureKind::kAgentStopped;
  rdzv::Failure failed;
  failed.kind = rdzv::FailureKind::kExited;
  CHECK(PeerSignalWait::applies(true, false, stopped, true));
  CHECK_FALSE(PeerSignalWait::applies(false, false, stopped, true));  // srun's proctrack does not signal all
  CHECK_FALSE(PeerSignalWait::applies(true, true, stopped, true));    // this node's own signal: already here
  CHECK_FALSE(PeerSignalWait::applies(true, false, failed, true));    // a failure: no signal is coming
  CHECK_FALSE(PeerSignalWait::applies(true, false, stopped, false));  // no worker to spare a second copy
}

TEST_CASE("the wait ends in the outcome after its time, or not at all when cancelled") {
  boost::asio::io_context io;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  PeerSignalWait wait(io, log);
  int outcomes = 0;
  const auto begin = std::chrono::steady_clock::now();
  wait.wait([&] { ++outcomes; });
  io.run_for(5s);
  CHECK(outcomes == 1);
  CHECK(std::chrono::steady_clock::now() - begin >= PeerSignalWait::kWait);
  wait.wait([&] { ++outcomes; });
  wait.cancel();
  io.restart();
  io.run_for(1s);
  CHECK(outcomes == 1);
}
