// The live view's numbers (agent/live_status.hpp): rates over the last minute, CPU from two readings, a tree's
// usage from /proc, and the JSON the view carries.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "agent/live_status.hpp"
#include "agent/metrics_textfile.hpp"

using namespace ddprun::agent;

namespace {
constexpr std::int64_t kSecond = 1'000'000'000;
}

TEST_CASE("a rank's rate spans the last minute, and a new worker of the rank starts afresh") {
  RateHistory h;
  CHECK_FALSE(h.rate(0).has_value());
  h.add(0, 100, 0, 0);
  CHECK_FALSE(h.rate(0).has_value());  // one sample: no rate yet
  for (int i = 1; i <= 30; ++i) h.add(0, 100, i * 5 * kSecond, i * 50);  // 10 steps/s for 150 s
  CHECK(*h.rate(0) == doctest::Approx(10.0));
  h.add(0, 100, 155 * kSecond, 1500 + 20 * 5);  // the last 5 s at 20 steps/s: the minute's mean moves a little
  CHECK(*h.rate(0) == doctest::Approx((1600.0 - 950.0) / 60.0));  // from the sample at 95 s, the minute's start
  h.add(0, 200, 160 * kSecond, 0);  // a restart: another pid
  CHECK_FALSE(h.rate(0).has_value());
  CHECK_FALSE(h.rate(1).has_value());
}

TEST_CASE("a rank's pace spans the straggler window: step time, and its own work per step where it says it") {
  RateHistory h(90 * kSecond);  // a window longer than the minute keeps samples that long
  h.add(0, 100, 0, 0, 0);
  h.add(0, 100, 5 * kSecond, 2, 0);
  CHECK_FALSE(h.pace(0, 20 * kSecond).has_value());  // 2 steps: too few to judge
  for (int i = 2; i <= 20; ++i) h.add(0, 100, i * 5 * kSecond, i * 50, i * 50 * 60'000'000LL);  // 0.1 s/step, 60 ms work
  auto p = h.pace(0, 20 * kSecond);
  REQUIRE(p.has_value());
  CHECK(p->rank == 0);
  CHECK(p->step_us == 100'000);
  CHECK(p->work_us == 60'000);
  h.add(1, 101, 0, 0);
  h.add(1, 101, 5 * kSecond, 100);  // never says its work
  CHECK(h.pace(1, 20 * kSecond)->work_us == -1);
  CHECK(h.pace(1, 20 * kSecond)->step_us == 50'000);
  for (int i = 21; i <= 38; ++i) h.add(0, 100, i * 5 * kSecond, i * 50, i * 50 * 60'000'000LL);
  CHECK(*h.rate(0) == doctest::Approx(10.0));  // kept for 90 s, the rate still spans one minute
}

TEST_CASE("CPU percent needs two readings and time between them") {
  CHECK_FALSE(cpu_percent(std::nullopt, 1.0, 5).has_value());
  CHECK_FALSE(cpu_percent(1.0, 2.0, 0).has_value());
  CHECK(*cpu_percent(1.0, 3.5, 5) == doctest::Approx(50.0));
}

TEST_CASE("a tree's usage counts the root and its descendants, and a gone root is absent") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setpgid(0, 0);  // one group, so that the test kills the grandchild too
    if (::fork() == 0) ::pause();  // a grandchild
    ::pause();
    ::_exit(0);
  }
  ::usleep(100'000);
  const auto usage = tree_usages({child, 999'999'999});
  REQUIRE(usage.count(child) == 1);
  CHECK(usage.at(child).rss_bytes > 0);
  CHECK(usage.count(999'999'999) == 0);
  ::kill(-child, SIGKILL);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST_CASE("the view's JSON leaves out what is not known as null, never a made-up number") {
  RankStatus r;
  r.rank = 3;
  r.state = "starting";
  const nlohmann::json j = r;
  CHECK(j["rank"] == 3);
  CHECK(j["step"].is_null());
  CHECK(j["steps_per_s"].is_null());
  CHECK(j["beat_age_s"].is_null());
  NodeStatus n;
  n.ranks.push_back(r);
  CHECK(nlohmann::json(n)["ranks"][0]["state"] == "starting");
}

TEST_CASE("the Prometheus text: gauges labelled job, node, host, rank; unknown values left out; labels escaped") {
  NodeStatus n;
  n.run_id = "slurm-7.0";
  n.node_rank = 1;
  n.host = "n\"2";
  n.restart_count = 2;
  n.world_size = 4;
  n.time_ms = 1'700'000'000'500;
  RankStatus beating;
  beating.rank = 2;
  beating.state = "running";
  beating.step = 41;
  beating.steps_per_s = 2.5;
  beating.beat_age_s = 0.25;
  beating.rss_bytes = 1 << 20;
  RankStatus silent;
  silent.rank = 3;
  silent.state = "starting";
  n.ranks = {beating, silent};
  const std::string text = prometheus_text(n);
  const std::string labels = "job=\"slurm-7.0\",node=\"1\",host=\"n\\\"2\"";
  CHECK(text.find("# TYPE ddprun_rank_step gauge\n") != std::string::npos);
  CHECK(text.find("ddprun_rank_state{" + labels + ",rank=\"2\",state=\"running\"} 1\n") != std::string::npos);
  CHECK(text.find("ddprun_rank_state{" + labels + ",rank=\"3\",state=\"starting\"} 1\n") != std::string::npos);
  CHECK(text.find("ddprun_rank_step{" + labels + ",rank=\"2\"} 41\n") != std::string::npos);
  CHECK(text.find("ddprun_rank_steps_per_second{" + labels + ",rank=\"2\"} 2.5\n") != std::string::npos);
  CHECK(text.find("ddprun_rank_step{" + labels + ",rank=\"3\"}") == std::string::npos);  // no beat: no sample
  CHECK(text.find("ddprun_job_restarts{" + labels + "} 2\n") != std::string::npos);
  CHECK(text.find("ddprun_job_rounds{" + labels + "} 3\n") != std::string::npos);
  CHECK(text.find("ddprun_status_timestamp_seconds{" + labels + "} 1.7e+09\n") != std::string::npos);
  CHECK(textfile_name(n) == "ddprun_slurm-7.0_node1.prom");
}

TEST_CASE("a job without a run id of its own has its pid in the metrics' run id; a named one keeps its name") {
  CHECK(metrics_run_id("none", 4242) == "none-4242");
  CHECK(metrics_run_id("slurm-7.0", 4242) == "slurm-7.0");
  CHECK(metrics_run_id("none-1", 4242) == "none-1");
}
