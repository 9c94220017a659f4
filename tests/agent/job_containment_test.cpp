// The job's containment (agent/job_containment.hpp): which SIGKILLs the OOM-kill count explains (pure), and a
// guard that dies replaced by a new one on the loop (the guard is a real process: that is what it is for).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <csignal>

#include "agent/job_containment.hpp"
#include "temp_dir.hpp"

using namespace ddprun::agent;

TEST_CASE("OOM attribution: each kill counted since the round began explains one death, no more") {
  OomAttribution oom;
  oom.on_round_start(3);
  CHECK_FALSE(oom.explains(3));  // no new kill: a SIGKILL from someone else
  CHECK(oom.explains(5));        // two new kills: the first death...
  CHECK(oom.explains(5));        // ...and the second
  CHECK_FALSE(oom.explains(5));  // a third death is not the OOM killer's
  oom.on_round_start(5);
  CHECK_FALSE(oom.explains(5));
}

TEST_CASE("OOM attribution: without a counter nothing is explained") {
  OomAttribution oom;
  oom.on_round_start(-1);
  CHECK_FALSE(oom.explains(-1));
  CHECK_FALSE(oom.explains(7));
  OomAttribution fresh;
  CHECK_FALSE(fresh.explains(1));  // no round started
}

TEST_CASE("a job guard that dies is replaced on the loop, with the same tag") {
  TempDir tmp;
  boost::asio::io_context io;
  ddprun::Logger log{ddprun::LogLevel::kOff, "ddprun", ""};
  JobContainment containment(io, log);
  containment.start(tmp.path);
  const std::string tag = containment.guard().tag();
  containment.watch();
  io.run_for(std::chrono::milliseconds(100));  // the guard's pid comes first
  const pid_t first = containment.guard().pid();
  REQUIRE(first > 0);
  REQUIRE(::kill(first, SIGKILL) == 0);
  for (int i = 0; i < 50 && containment.guard().pid() == first; ++i) {
    io.restart();
    io.run_for(std::chrono::milliseconds(20));
  }
  CHECK(containment.guard().pid() != first);
  CHECK(containment.guard().tag() == tag);
  containment.end_cgroup();
  containment.dismiss();
}
