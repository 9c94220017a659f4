// common/process/job_cgroup.hpp's OomKillCounter on a made-up cgroup tree: the counter it reads and the
// limit it names. (A real OOM kill: tests/integration/test_supervision.py, OomKill.)
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "common/process/job_cgroup.hpp"
#include "temp_dir.hpp"

using ddprun::process::OomKillCounter;

namespace {
void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
}  // namespace

TEST_CASE("the OOM kill counter reads oom_kill and names the lowest memory limit above it") {
  TempDir top;
  const std::string job = top.path + "/slice", leaf = job + "/ddprun-job";
  ::mkdir(job.c_str(), 0755);
  ::mkdir(leaf.c_str(), 0755);
  write(leaf + "/memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\noom_group_kill 0\n");
  write(leaf + "/memory.max", "max\n");
  write(job + "/memory.max", "67108864\n");
  write(top.path + "/memory.max", "1073741824\n");
  const OomKillCounter counter(leaf + "/memory.events", leaf, top.path, "memory.max");
  CHECK(counter.active());
  CHECK(counter.kills() == 2);
  CHECK(counter.limit() == "memory limit 64.0 MiB, set by memory.max of " + job);
  write(leaf + "/memory.events", "oom 2\noom_kill 3\n");
  CHECK(counter.kills() == 3);
}

TEST_CASE("without a limit the machine's memory is what ran out; without a counter nothing is known") {
  TempDir top;
  write(top.path + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  write(top.path + "/memory.limit_in_bytes", "9223372036854771712\n");  // cgroup v1's "no limit"
  const OomKillCounter counter(top.path + "/memory.oom_control", top.path, top.path, "memory.limit_in_bytes");
  CHECK(counter.kills() == 0);
  CHECK(counter.limit().rfind("no cgroup memory limit, so the machine's ", 0) == 0);
  CHECK(counter.limit().find(" GiB ran out") != std::string::npos);
  CHECK(OomKillCounter().kills() == -1);
  CHECK(OomKillCounter(top.path + "/gone", top.path, top.path, "memory.max").kills() == -1);
}
