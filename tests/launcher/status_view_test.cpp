// ddprun-status's screen (launcher/status_view.hpp) from a two-node document.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "launcher/status_view.hpp"

using namespace ddprun::launcher;
using nlohmann::json;

TEST_CASE("one screen: the job's line, a line per node, a line per rank in rank order, blanks for the unknown") {
  const json rank2 = {{"rank", 2}, {"local_rank", 0}, {"pid", 300}, {"state", "running"}, {"step", 41},
                      {"steps_per_s", 2.5}, {"beat_age_s", 0.25}, {"cpu_percent", 97.0}, {"rss_bytes", 1610612736},
                      {"work_per_step_s", 0.1504}, {"straggler", true}};
  const json rank0 = {{"rank", 0}, {"local_rank", 0}, {"pid", 100}, {"state", "starting"}, {"step", nullptr},
                      {"steps_per_s", nullptr}, {"beat_age_s", nullptr}, {"cpu_percent", nullptr},
                      {"rss_bytes", nullptr}};
  const json job = {{"complete", true},
                    {"stragglers",
                     {{{"rank", 2}, {"node_rank", 1}, {"host", "n2"}, {"per_step_s", 0.1504}, {"median_s", 0.1},
                       {"measure", "work"}}}},
                    {"nodes",
                     {{{"node_rank", 1}, {"host", "n2"}, {"state", "running"}, {"run_id", "slurm-7.0"},
                       {"restart_count", 1}, {"max_restarts", 3}, {"world_size", 3}, {"nnodes", 2},
                       {"started_ms", 1000}, {"age_ms", 0}, {"ranks", {rank2}}},
                      {{"node_rank", 0}, {"host", "n1"}, {"state", "running"}, {"age_ms", 2300},
                       {"ranks", {rank0}}}}}};
  const std::string screen = render_job(job, 1000 + 3723'000);
  CHECK(screen.rfind("run slurm-7.0  round 1 (max restarts 3)  world 3 on 2 nodes  age 01:02:03\n", 0) == 0);
  CHECK(screen.find("0     n1    running  1      2.3s ago") != std::string::npos);
  const auto r0 = screen.find("\n0     0     n1    100  starting\n");
  const auto r2 = screen.find("\n2     1     n2    300  slow      41    2.50     0.150s     0.2s       97    1.5G\n");
  CHECK(r0 != std::string::npos);
  CHECK(r2 != std::string::npos);
  CHECK(r0 < r2);
  CHECK(screen.find("\nstraggler: rank 2 (node 1, host n2): 0.150 s of its own work per step, the other ranks' median "
                    "0.100 s (+50%)\n") != std::string::npos);
}

TEST_CASE("sizes and ages for people") {
  CHECK(human_bytes(json(512)) == "512B");
  CHECK(human_bytes(json(3 * 1024 * 1024)) == "3.0M");
  CHECK(human_bytes(json(nullptr)).empty());
  CHECK(human_age(59'999) == "00:00:59");
  CHECK(human_age(90'061'000) == "1d 01:01:01");
}

// Issue 32: a named straggler that then stopped beating and was found hung showed "slow" (the flag won).
TEST_CASE("the agent's state is shown as it is: a hung straggler is hung, a slow one slow") {
  auto job_with = [](const char* state) {
    const json rank = {{"rank", 1}, {"local_rank", 1}, {"pid", 200}, {"state", state}, {"step", 7},
                       {"steps_per_s", nullptr}, {"beat_age_s", 31.0}, {"cpu_percent", nullptr},
                       {"rss_bytes", nullptr}, {"straggler", true}};
    return json{{"complete", true},
                {"nodes", {{{"node_rank", 0}, {"host", "n1"}, {"state", "running"}, {"age_ms", 0}, {"ranks", {rank}}}}}};
  };
  CHECK(render_job(job_with("hung"), 1000).find("\n1     0     n1    200  hung ") != std::string::npos);
  CHECK(render_job(job_with("slow"), 1000).find("\n1     0     n1    200  slow ") != std::string::npos);
}

// Issue 33: another node's strings reached the terminal raw. An insider's status with a title sequence, a
// clear-screen and a forged line, in its host, state and run id, and numbers of the wrong type: every control
// character is shown as \xNN, C1's CSI too, and nothing throws.
TEST_CASE("another node's strings cannot act on the terminal, and a malformed status renders") {
  const json hostile_rank = {{"rank", "7"}, {"state", "running\x1b[2J"}, {"straggler", "yes"}, {"pid", 1.5}};
  const json job = {{"complete", "no"},
                    {"stragglers", {{{"rank", 1}, {"node_rank", 0}, {"host", "n\x1b]0;owned\x07"}, {"per_step_s", "x"}}}},
                    {"nodes",
                     {{{"node_rank", 0}, {"host", "n1"}, {"run_id", "job\x1b]0;title\x07"}, {"state", "running"},
                       {"nnodes", "2"}, {"started_ms", "now"}, {"ranks", json::array()}},
                      {{"node_rank", "1"}, {"host", "evil\nrank 0 hung\r"}, {"state", "\xc2\x9b" "31m"},
                       {"age_ms", "old"}, {"ranks", {hostile_rank, 5}}},
                      7}}};
  std::string screen;
  REQUIRE_NOTHROW(screen = render_job(job, 1000));
  for (unsigned char c : screen) CHECK((c >= 0x20 || c == '\n'));  // no escape, no carriage return, no bell
  CHECK(screen.find("\xc2\x9b") == std::string::npos);
  CHECK(screen.find("run job\\x1b]0;title\\x07  round") != std::string::npos);
  CHECK(screen.find("evil\\x0arank 0 hung\\x0d") != std::string::npos);
  CHECK(screen.find("\\xc2\\x9b31m") != std::string::npos);
  CHECK(screen.find("running\\x1b[2J") != std::string::npos);
  CHECK(screen.find("host n\\x1b]0;owned\\x07)") != std::string::npos);
}

// Issue 55: bidirectional controls and zero-width characters reached ddprun-status unescaped: a right-to-left
// override shows "evil" as another word, a zero-width space splits a name invisibly. Each is shown byte by byte.
TEST_CASE("another node's bidirectional and zero-width characters are shown, never applied") {
  const json job = {{"nodes",
                     {{{"node_rank", 0}, {"host", "a\xe2\x80\xaelive"}, {"run_id", "j\xe2\x80\x8bob"},
                       {"state", "run\xe2\x81\xa6ning\xef\xbb\xbf\xd8\x9c"}, {"ranks", json::array()}}}}};
  const std::string screen = render_job(job, 1000);
  for (const char* raw : {"\xe2\x80\xae", "\xe2\x80\x8b", "\xe2\x81\xa6", "\xef\xbb\xbf", "\xd8\x9c"})
    CHECK(screen.find(raw) == std::string::npos);
  CHECK(screen.find("a\\xe2\\x80\\xaelive") != std::string::npos);
  CHECK(screen.find("j\\xe2\\x80\\x8bob") != std::string::npos);
  CHECK(screen.find("run\\xe2\\x81\\xa6ning\\xef\\xbb\\xbf\\xd8\\x9c") != std::string::npos);
  CHECK(screen.find("\xc3\xa9") == std::string::npos);  // nothing else of UTF-8 is touched: see below
  CHECK(render_job(json{{"nodes", {{{"node_rank", 0}, {"host", "caf\xc3\xa9"}, {"ranks", json::array()}}}}}, 1000)
            .find("caf\xc3\xa9") != std::string::npos);
}
