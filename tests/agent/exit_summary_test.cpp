// The summary's account of a root cause that ran on this node and wrote no error file (what its stderr says), and
// its advice when argparse stopped a Python worker over torch.distributed.launch's --local_rank.
#include <doctest/doctest.h>

#include <csignal>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/exit_summary.hpp"

using namespace ddprun::agent;

namespace {
ddprun::process::ExitStatus exited(int code) {
  ddprun::process::ExitStatus s;
  s.code = code;
  return s;
}

ddprun::process::ExitStatus killed(int signal) {
  ddprun::process::ExitStatus s;
  s.signaled = true;
  s.signal = signal;
  return s;
}

// Two workers on one node; rank 1 fails with `status` first, rank 0 is the teardown's victim. Each rank's
// stderr is what `stderr_of` holds for it.
struct Job {
  SupervisionPolicy policy;
  std::map<int, StreamTail> tails;
  SummaryContext ctx;

  explicit Job(const ddprun::process::ExitStatus& status, const std::string& rank1_stderr) {
    policy.add_worker(0, 0, 100, 1000);
    policy.add_worker(1, 1, 101, 1000);
    tails.emplace(1, StreamTail(8192));
    tails.at(1).add(rank1_stderr.data(), rank1_stderr.size());
    policy.on_exit(1, status, 2000);
    policy.on_exit(0, killed(SIGTERM), 2001);
    ctx.host = "gpu7";
    ctx.start_ms = 1000;
    ctx.end_ms = 2002;
    ctx.error_file_of = [](int) { return std::string("/nonexistent/error.json"); };
    ctx.stderr_tail_of = [this](int lr) -> const StreamTail* {
      auto it = tails.find(lr);
      return it == tails.end() ? nullptr : &it->second;
    };
    ctx.python = "/usr/bin/python3";
    ctx.python_origin = "PYTHON_EXEC";
  }
  std::string text() const { return summary_text(policy, ctx); }
};

const std::string kTraceback = "Traceback (most recent call last):\n  File \"/job/train.py\", line 9, in <module>\n"
                               "    main()\n  File \"/job/train.py\", line 3, in main\n    raise RuntimeError(\"boom\")\n"
                               "RuntimeError: boom\n";
}  // namespace

TEST_CASE("without an error file, the root cause's exception and frames come from its stderr") {
  Job job(exited(1), "step 1\n" + kTraceback);
  const std::string text = job.text();
  CHECK(text.find("ddprun: root cause error (rank 1's stderr): RuntimeError: boom\n"
                  "ddprun: root cause traceback (rank 1's stderr, last 2 of 2 frames):\n"
                  "ddprun: | Traceback (most recent call last):\n"
                  "ddprun: |   File \"/job/train.py\", line 9, in <module>\n") != std::string::npos);
  CHECK(text.find("ddprun: | RuntimeError: boom\n") != std::string::npos);
  CHECK(text.find("step 1") == std::string::npos);
  CHECK(text.find("cannot import") == std::string::npos);
  // The events file's summary carries it too, marked as read from stderr.
  const nlohmann::json j = summary_json(job.policy, job.ctx);
  const nlohmann::json& tb = j["root_cause"]["traceback"];
  CHECK(tb["source"] == "stderr");
  CHECK(tb["exception"] == "RuntimeError: boom");
  CHECK(tb["frames_total"] == 2);
  CHECK(tb["lines"].back() == "RuntimeError: boom");
}

TEST_CASE("a traceback whose start was not kept says its earlier frames are lost") {
  std::string long_stderr(9000, 'x');
  Job job(exited(1), long_stderr + "\n" + kTraceback.substr(kTraceback.find("  File \"/job/train.py\", line 3")));
  CHECK(job.text().find("root cause traceback (rank 1's stderr, last 1 frame; earlier ones were not kept):") !=
        std::string::npos);
}

TEST_CASE("without a traceback, the root cause's last line on stderr is shown as such") {
  Job job(exited(2), "usage: train.py [-h] --lr LR\ntrain.py: error: the following arguments are required: --lr\n");
  const std::string text = job.text();
  CHECK(text.find("ddprun: rank 1's last line on stderr: train.py: error: the following arguments are required: "
                  "--lr\n") != std::string::npos);
  CHECK(text.find("root cause error") == std::string::npos);
  CHECK(summary_json(job.policy, job.ctx)["root_cause"].count("traceback") == 0);
}

TEST_CASE("an import error on stderr names the interpreter") {
  Job job(exited(1), "Traceback (most recent call last):\n  File \"/job/train.py\", line 1, in <module>\n"
                     "    import torch\nModuleNotFoundError: No module named 'torch'\n");
  const std::string text = job.text();
  CHECK(text.find("root cause error (rank 1's stderr): ModuleNotFoundError: No module named 'torch'") !=
        std::string::npos);
  CHECK(text.find("rank 1 ran /usr/bin/python3 (PYTHON_EXEC), which cannot import that module") != std::string::npos);
}

TEST_CASE("python -m that finds no module says where it looked") {
  Job job(exited(1), "/usr/bin/python3: No module named mypkg.train\n");
  const std::string text = job.text();
  CHECK(text.find("root cause error (rank 1's stderr): /usr/bin/python3: No module named mypkg.train\n") !=
        std::string::npos);
  CHECK(text.find("rank 1 ran /usr/bin/python3 (PYTHON_EXEC), which cannot find the module -m names: it looks in "
                  "the working directory, PYTHONPATH") != std::string::npos);
}

TEST_CASE("pdb quitting for want of a terminal points at --stdin-rank") {
  const std::string quit = "Traceback (most recent call last):\n  File \"/job/train.py\", line 4, in <module>\n"
                           "  File \"/usr/lib/python3.11/bdb.py\", line 115, in dispatch_line\n"
                           "    if self.quitting: raise BdbQuit\nbdb.BdbQuit\n";
  Job job(exited(1), quit);
  CHECK(job.text().find("ddprun: rank 1 stopped at a breakpoint and pdb quit at once: its stdin is /dev/null. To "
                        "debug it, run again with --stdin-rank 1, which gives ddprun's terminal to rank 1 alone") !=
        std::string::npos);
  job.ctx.stdin_rank = 0;  // another rank had the terminal
  CHECK(job.text().find("Only rank 0 (--stdin-rank) reads ddprun's terminal: call breakpoint() on that rank only "
                        "(e.g. if int(os.environ[\"RANK\"]) == 0), or pass --stdin-rank 1\n") != std::string::npos);
  job.ctx.stdin_rank = 1;  // it had the terminal: the user quit pdb
  CHECK(job.text().find("stopped at a breakpoint") == std::string::npos);
  Job other(exited(1), kTraceback);
  CHECK(other.text().find("stopped at a breakpoint") == std::string::npos);
}

TEST_CASE("a root cause killed by a signal is not explained by whatever it last printed") {
  Job job(killed(SIGSEGV), kTraceback);
  const std::string text = job.text();
  CHECK(text.find("RuntimeError") == std::string::npos);
  CHECK(text.find("last line on stderr") == std::string::npos);
}

TEST_CASE("argparse's word on --local_rank names the switch that fixes it") {
  // Required, and ddprun passed nothing (a launch script under ddprun's torchrun line): the spelling argparse names.
  CHECK(local_rank_arg_advice("train.py: error: the following arguments are required: --local_rank", "") ==
        "script requires --local_rank, which torch.distributed.launch passed and torchrun does not: start it as "
        "ddprun-launch (launch's behaviour), or give --local-rank-arg underscore, to pass --local_rank=N to every "
        "worker");
  CHECK(local_rank_arg_advice("t.py: error: the following arguments are required: --lr, --local-rank", "")
            .find("--local-rank-arg dash, to pass --local-rank=N") != std::string::npos);
  // Issue 54: under --use-env the advice was --local-rank-arg, which ddprun refuses beside --use-env.
  CHECK(local_rank_arg_advice("t.py: error: the following arguments are required: --local_rank", "", true) ==
        "script requires --local_rank, which torch.distributed.launch passed only without --use-env (torchrun never "
        "does): drop --use-env, or give --local-rank-arg underscore in its place, to pass --local_rank=N to every "
        "worker");
  // Given a spelling the script does not take: the other one, or none.
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --local-rank=1", "--local-rank") ==
        "script does not take the --local-rank=N ddprun passed: --local-rank-arg underscore passes --local_rank=N "
        "instead, --local-rank-arg none passes nothing");
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --x --local_rank=0", "--local_rank")
            .find("--local-rank-arg dash passes --local-rank=N instead") != std::string::npos);
  // Anything else is not about it.
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --lr=1", "--local_rank").empty());
  CHECK(local_rank_arg_advice("t.py: error: the following arguments are required: --lr", "").empty());
  CHECK(local_rank_arg_advice("t.py: error: the following arguments are required: --local_rank", "--local_rank")
            .empty());  // given and still missing: not the switch's doing
  CHECK(local_rank_arg_advice("t.py: error: unrecognized arguments: --local_rank=0", "").empty());
  CHECK(local_rank_arg_advice("ValueError: --local_rank", "").empty());
  CHECK(local_rank_arg_advice("", "").empty());
}

TEST_CASE("the NCCL Flight Recorder dumps of a hang are named in the summary, text and JSON") {
  Job job(killed(SIGKILL), "");
  job.ctx.nccl_dumps = {{0, "/logs/job/attempt_0/0/nccl_trace_rank_0"}, {1, "/logs/job/attempt_0/1/nccl_trace_rank_1"}};
  const std::string text = job.text();
  CHECK(text.find("ddprun: NCCL Flight Recorder dump of rank 0 in /logs/job/attempt_0/0/nccl_trace_rank_0\n") !=
        std::string::npos);
  CHECK(text.find("dump of rank 1 in /logs/job/attempt_0/1/nccl_trace_rank_1\n") != std::string::npos);
  const nlohmann::json j = summary_json(job.policy, job.ctx);
  CHECK(j["nccl_dumps"] == nlohmann::json::parse(R"([{"rank": 0, "file": "/logs/job/attempt_0/0/nccl_trace_rank_0"},
                                                     {"rank": 1, "file": "/logs/job/attempt_0/1/nccl_trace_rank_1"}])"));
  Job none(killed(SIGKILL), "");
  CHECK(none.text().find("Flight Recorder") == std::string::npos);
  CHECK_FALSE(summary_json(none.policy, none.ctx).contains("nccl_dumps"));
}

TEST_CASE("under a SLURM step each line of the summary names its node; elsewhere the text is unchanged") {
  const std::string text = "ddprun: job FAILED after 1.000 s\nddprun: root cause: rank 3 exited with code 7\n";
  CHECK(label_lines(text, "") == text);
  CHECK(label_lines(text, "n2") ==
        "[n2] ddprun: job FAILED after 1.000 s\n[n2] ddprun: root cause: rank 3 exited with code 7\n");
  CHECK(label_lines("no newline", "n1") == "[n1] no newline");
  CHECK(label_lines("", "n1").empty());
}

TEST_CASE("durations come from the monotonic clock: a wall-clock step back during the job changes nothing") {
  // Issue 33: an NTP step back of an hour during the job made the summary say "succeeded in -3578 s".
  SupervisionPolicy policy;
  policy.add_worker(0, 0, 100, 5'000'000);
  policy.on_exit(0, exited(0), 1'400'000);  // the wall clock went back an hour meanwhile
  SummaryContext ctx;
  ctx.start_ms = 5'000'000;
  ctx.end_ms = 1'412'000;
  ctx.elapsed_ms = 22'000;
  CHECK(summary_text(policy, ctx).find("the worker succeeded in 22.000 s") != std::string::npos);
  ddprun::process::ExitStatus failed = exited(3);
  SupervisionPolicy failing;
  failing.add_worker(0, 0, 100, 5'000'000);
  failing.on_exit(0, failed, 1'400'000);
  const std::string text = summary_text(failing, ctx);
  CHECK(text.find("after 22.000 s") != std::string::npos);
  CHECK(text.find("+0.000s") != std::string::npos);  // its end within the job, not 3600 s before its start
  CHECK(text.find("-3") == std::string::npos);
}
