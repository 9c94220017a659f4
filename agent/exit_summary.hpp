// The account of a finished job: every worker's fate and the root cause, as text for people (one block on
// stderr) and as JSON for tools (the events file's "summary" line).
#pragma once

#include "common/time.hpp"  // iso_time

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "agent/stream_tail.hpp"
#include "agent/supervision_policy.hpp"

namespace ddprun::agent {

// A round of the job that ended in a re-form (a restart after a failure, or an elastic membership change).
struct Attempt {
  int round = 0;       // TORCHELASTIC_RESTART_COUNT of its workers
  int nnodes = 0;
  int world_size = 0;
  std::string cause;   // its root cause, or why the membership changed
};

struct SummaryContext {
  std::string host;
  int node_rank = 0;
  std::int64_t start_ms = 0;
  std::int64_t end_ms = 0;
  // The job's length by the monotonic clock (issue 33: "succeeded in -3578 s" after an NTP step moved the wall
  // clock back). -1: not measured, end_ms - start_ms is used.
  std::int64_t elapsed_ms = -1;
  std::string log_root;  // kept log directory, empty if none
  // The last attempt's files of a local rank, to show the root cause's traceback (from its error file) and
  // where the full text is. Unset: no files to read.
  std::function<std::string(int local_rank)> error_file_of;
  // Where that file is for the user once ddprun ends (with --log-dir: copied into the log tree).
  std::function<std::string(const std::string& path)> shown_path = [](const std::string& p) { return p; };
  std::function<std::string(int local_rank)> worker_dir_of;
  // The end of what a local rank wrote on stderr (bounded), for failures without an error file: its
  // traceback, or its last line. Unset, or null: none kept.
  std::function<const StreamTail*(int local_rank)> stderr_tail_of;
  std::string python;         // the interpreter the workers ran, resolved; empty when the program is not Python
  std::string python_origin;  // how it was chosen, e.g. "PYTHON_EXEC" or "python3 from PATH"
  std::string local_rank_arg;  // the launch-style option each worker got ("--local_rank"), "" none
  bool use_env = false;                  // --use-env: nothing passed on purpose
  int stdin_rank = -1;        // --stdin-rank: the global rank that reads ddprun's stdin; -1: none
  // The rounds before the last that this node ran, oldest first; the summary lists each one's cause.
  std::vector<Attempt> attempts;
  // Output that did not reach its place (a log file that could not be written, a console that closed),
  // one sentence each: the summary says so, since a job that "succeeded" may still have lost its logs.
  std::vector<std::string> output_losses;
  // The NCCL Flight Recorder dumps a hang's capture got on this node (agent/flight_recorder.hpp), where the
  // user finds them: evidence beside the stacks file the root cause names.
  struct NcclDumpFile {
    int rank = 0;
    std::string file;
  };
  std::vector<NcclDumpFile> nccl_dumps;
};

// What to do about torch.distributed.launch's local rank option when argparse ended a Python worker over it:
// `line` (the worker's last stderr line) says the script requires the option and `passed` (the one ddprun gave,
// "--local_rank" or "--local-rank", "" none) is empty, or that the script does not take `passed`. One
// sentence naming ddprun-launch or --local-rank-arg; "" for any other line.
// `use_env`: --use-env was given (nothing passed on purpose; --local-rank-arg is refused beside it).
std::string local_rank_arg_advice(const std::string& line, const std::string& passed, bool use_env = false);

nlohmann::json worker_json(const WorkerRecord& w);
nlohmann::json summary_json(const SupervisionPolicy& policy, const SummaryContext& ctx);
// Multi-line block, each line starting with "ddprun: ", ending with a newline.
// Under a SLURM step every node's summary lands in one output (slurm-%j.out), its lines mixed with the other
// nodes': each line then starts with "[NODE] " (SLURMD_NODENAME), as ddprun's log lines carry it. "ddprun: root
// cause: ..." stays inside the line for those who search for it. `node` empty: the text as it is.
std::string label_lines(const std::string& text, const std::string& node);
std::string summary_text(const SupervisionPolicy& policy, const SummaryContext& ctx);

}  // namespace ddprun::agent
