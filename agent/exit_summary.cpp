#include "agent/exit_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "agent/error_file.hpp"

namespace ddprun::agent {
namespace {
// The end of a root cause's stderr, when it can explain the failure: the worker wrote no error file, it ran
// (an exec failure printed nothing), and it exited with a code (one killed by a signal did not get to tell
// its story: its last line is whatever it was printing).
std::optional<StderrEnd> stderr_end_of(const WorkerRecord& root, const SummaryContext& ctx) {
  if (!ctx.stderr_tail_of || root.pid == 0 || root.status.signaled) return std::nullopt;
  if (ctx.error_file_of && read_error_file(ctx.error_file_of(root.local_rank)).present) return std::nullopt;
  const StreamTail* tail = ctx.stderr_tail_of(root.local_rank);
  if (!tail) return std::nullopt;
  return read_stderr_end(tail->text(), tail->from_start());
}

// "root cause traceback (rank 3, last 5 of 12 frames):" and the lines, each behind "ddprun: | ".
void append_traceback(std::ostringstream& out, const std::string& source, const TracebackTail& t, bool total_known) {
  out << "ddprun: root cause traceback (" << source << ", last " << t.frames_shown;
  if (total_known) out << " of " << t.frames_total << (t.frames_total == 1 ? " frame" : " frames");
  else out << (t.frames_shown == 1 ? " frame" : " frames") << "; earlier ones were not kept";
  out << "):\n";
  for (const std::string& line : t.lines) out << "ddprun: | " << line << "\n";
}

// No error file: what the worker printed last on stderr. A traceback gives the exception and its last
// frames; else the last line is shown as what it is (argparse's "error:", sys.exit's message). Returns
// the exception or import error it names, for the notes that follow.
std::string append_stderr_end(std::ostringstream& out, const WorkerRecord& root, const SummaryContext& ctx) {
  const std::optional<StderrEnd> end = stderr_end_of(root, ctx);
  if (!end) return {};
  const std::string rank = "rank " + std::to_string(root.rank);
  if (!end->exception.empty()) {
    out << "ddprun: root cause error (" << rank << "'s stderr): " << end->exception << "\n";
    append_traceback(out, rank + "'s stderr", end->traceback, end->start_kept);
    return end->exception;
  }
  if (end->last_line.empty()) return {};
  if (is_import_error(end->last_line)) {
    out << "ddprun: root cause error (" << rank << "'s stderr): " << end->last_line << "\n";
    return end->last_line;
  }
  out << "ddprun: " << rank << "'s last line on stderr: " << end->last_line << "\n";
  return {};
}

// pdb's BdbQuit from a breakpoint(): a worker's stdin is /dev/null unless it is --stdin-rank's, so pdb read
// end of file at its first prompt and quit. Said only where that is why (not on the rank that had stdin:
// there the user quit, or ddprun's own stdin ended).
void append_breakpoint_note(std::ostringstream& out, int rank, int stdin_rank) {
  if (rank == stdin_rank) return;
  const std::string r = std::to_string(rank);
  out << "ddprun: rank " << r << " stopped at a breakpoint and pdb quit at once: its stdin is /dev/null. ";
  if (stdin_rank < 0)
    out << "To debug it, run again with --stdin-rank " << r << ", which gives ddprun's terminal to rank " << r
        << " alone (the other ranks' breakpoints quit the same way: call breakpoint() on that rank only)\n";
  else
    out << "Only rank " << stdin_rank << " (--stdin-rank) reads ddprun's terminal: call breakpoint() on that rank "
        << "only (e.g. if int(os.environ[\"RANK\"]) == " << stdin_rank << "), or pass --stdin-rank " << r << "\n";
}

// What explains a root cause that ran on this node: the end of its traceback (from its error file, else
// from its stderr), the interpreter when it could not import a module, and where the full error file and
// logs are kept.
void append_root_detail(std::ostringstream& out, const WorkerRecord& root, const SummaryContext& ctx) {
  const bool kept = !ctx.log_root.empty();
  const std::string rank = "rank " + std::to_string(root.rank);
  std::string error = root.error_message;
  bool error_file = false;
  if (ctx.error_file_of) {
    const std::string path = ctx.error_file_of(root.local_rank);
    const ErrorFileContents ef = read_error_file(path);
    if (ef.present) {
      error_file = true;
      error = ef.message;
      if (!ef.where.empty()) append_traceback(out, rank, traceback_tail(ef.where), true);
      if (kept) out << "ddprun: full error file: " << ctx.shown_path(path) << "\n";
    }
  }
  if (!error_file) error = append_stderr_end(out, root, ctx);
  if (is_import_error(error) && !ctx.python.empty()) {
    out << "ddprun: " << rank << " ran " << ctx.python << " (" << ctx.python_origin;
    // python -m X found no X: the package may be where this interpreter does not look, as much as missing.
    if (is_module_lookup_error(error))
      out << "), which cannot find the module -m names: it looks in the working directory, PYTHONPATH and its own "
             "site-packages; start ddprun where the package is, add its directory to PYTHONPATH, or name an "
             "interpreter that has it installed with PYTHON_EXEC=/path/to/python\n";
    else
      out << "), which cannot import that module: name an interpreter that has it with PYTHON_EXEC=/path/to/python, "
             "or activate its virtual environment before starting ddprun\n";
  }
  if (error.find("BdbQuit") != std::string::npos) append_breakpoint_note(out, root.rank, ctx.stdin_rank);
  // argparse (exit code 2) stopped the script over launch's --local_rank: say which switch fixes it.
  if (!root.status.signaled && root.status.code == 2 && ctx.stderr_tail_of) {
    const StreamTail* tail = ctx.stderr_tail_of(root.local_rank);
    const std::string advice =
        tail ? local_rank_arg_advice(read_stderr_end(tail->text(), tail->from_start()).last_line, ctx.local_rank_arg,
                                     ctx.use_env)
             : "";
    if (!advice.empty()) out << "ddprun: " << rank << "'s " << advice << "\n";
  }
  if (kept && ctx.worker_dir_of) out << "ddprun: " << rank << "'s files: " << ctx.worker_dir_of(root.local_rank) << "\n";
  if (!kept && error_file) out << "ddprun: --log-dir DIR keeps the full error file and the workers' logs\n";
}
// The root cause's worker when it ran on this node: the job's cause names it by global rank (from the
// rendezvous, the same on every node), else the local policy's first failure.
const WorkerRecord* root_worker_here(const SupervisionPolicy& policy, const SummaryContext& ctx) {
  const auto& cause = policy.job_cause();
  if (!cause) return policy.root_cause();
  if (cause->node_rank != ctx.node_rank || cause->rank < 0) return nullptr;
  for (const auto& w : policy.workers())
    if (w.rank == cause->rank) return &w;
  return nullptr;
}

// The end of the root cause's traceback from its error file, for tools: {"frames_total", "lines"}; null
// when the root cause ran elsewhere or wrote no call stack.
nlohmann::json traceback_json(const SupervisionPolicy& policy, const SummaryContext& ctx) {
  const WorkerRecord* root = root_worker_here(policy, ctx);
  if (!root) return nullptr;
  if (const std::optional<StderrEnd> end = stderr_end_of(*root, ctx); end && !end->exception.empty()) {
    const TracebackTail& t = end->traceback;
    // "frames_total" counts what was kept when "start_kept" is false.
    return {{"source", "stderr"}, {"exception", end->exception}, {"frames_total", t.frames_total},
            {"frames_shown", t.frames_shown}, {"start_kept", end->start_kept}, {"lines", t.lines}};
  }
  if (!ctx.error_file_of) return nullptr;
  const ErrorFileContents ef = read_error_file(ctx.error_file_of(root->local_rank));
  if (!ef.present || ef.where.empty()) return nullptr;
  const TracebackTail t = traceback_tail(ef.where);
  nlohmann::json j{{"source", "error_file"}, {"frames_total", t.frames_total}, {"frames_shown", t.frames_shown},
                   {"lines", t.lines}};
  if (!ctx.log_root.empty()) j["error_file"] = ctx.shown_path(ctx.error_file_of(root->local_rank));
  return j;
}

void append_output_losses(std::ostringstream& out, const std::vector<std::string>& losses) {
  for (const std::string& loss : losses) out << "ddprun: warning: output lost: " << loss << "\n";
}

// The rounds that ended in a re-form, each with its cause: after a budget spent, the whole story of the job.
void append_attempts(std::ostringstream& out, const std::vector<Attempt>& attempts) {
  if (attempts.empty()) return;
  constexpr std::size_t kShown = 20;  // the most recent; a long elastic job may have had many rounds
  // One node restarts its workers; several re-form the job (the word users read in the other nodes' logs too).
  const bool one_node = std::all_of(attempts.begin(), attempts.end(), [](const Attempt& a) { return a.nnodes == 1; });
  out << "ddprun: earlier rounds (" << attempts.size() << "), each ended by a " << (one_node ? "restart" : "re-form")
      << ":\n";
  const std::size_t first = attempts.size() > kShown ? attempts.size() - kShown : 0;
  if (first > 0) out << "ddprun:   ... " << first << " earlier\n";
  for (std::size_t i = first; i < attempts.size(); ++i) {
    const Attempt& a = attempts[i];
    out << "ddprun:   round " << a.round << " (" << a.nnodes << (a.nnodes == 1 ? " node" : " nodes")
        << ", world size " << a.world_size << "): " << a.cause << "\n";
  }
}
}  // namespace

std::string local_rank_arg_advice(const std::string& line, const std::string& passed, bool use_env) {
  const bool underscore = line.find("--local_rank") != std::string::npos;
  const bool dash = line.find("--local-rank") != std::string::npos;
  if (line.find("error: ") == std::string::npos || !(underscore || dash)) return {};
  if (passed.empty() && line.find("the following arguments are required:") != std::string::npos) {
    const std::string spelling = underscore ? "--local_rank" : "--local-rank";
    // --use-env said "pass nothing", and --local-rank-arg beside it is refused (issue 54: the advice named it).
    if (use_env)
      return "script requires " + spelling + ", which torch.distributed.launch passed only without --use-env "
             "(torchrun never does): drop --use-env, or give --local-rank-arg " + (underscore ? "underscore" : "dash") +
             " in its place, to pass " + spelling + "=N to every worker";
    return "script requires " + spelling + ", which torch.distributed.launch passed and torchrun does not: "
           "start it as ddprun-launch (launch's behaviour), or give --local-rank-arg " +
           (underscore ? "underscore" : "dash") + ", to pass " + spelling + "=N to every worker";
  }
  if (!passed.empty() && line.find("unrecognized arguments:") != std::string::npos &&
      line.find(passed + "=") != std::string::npos) {
    // Passed (ddprun-launch or --local-rank-arg) and refused: the other spelling, or nothing (a script that
    // reads LOCAL_RANK, as under torchrun).
    const bool gave_dash = passed == "--local-rank";
    return "script does not take the " + passed + "=N ddprun passed: --local-rank-arg " +
           (gave_dash ? "underscore passes --local_rank=N" : "dash passes --local-rank=N") +
           " instead, --local-rank-arg none passes nothing";
  }
  return {};
}

nlohmann::json worker_json(const WorkerRecord& w) {
  nlohmann::json j{{"rank", w.rank}, {"local_rank", w.local_rank}, {"pid", w.pid}, {"state", to_string(w.state)}};
  if (w.raised) j["raised"] = true;  // failed by its error file, before its exit (agent/error_file_watch.hpp)
  if (w.state != WorkerState::kRunning || w.raised) {
    if (w.status.signaled) {
      j["signal"] = w.status.signal;
      j["signal_name"] = process::signal_name(w.status.signal);
    } else {
      j["exit_code"] = w.status.code;
    }
    j["time_ms"] = w.end_ms;
  }
  if (!w.error_message.empty()) j["error"] = w.error_message;
  if (!w.reason.empty()) j["reason"] = w.reason;
  return j;
}

nlohmann::json summary_json(const SupervisionPolicy& policy, const SummaryContext& ctx) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : policy.workers()) workers.push_back(worker_json(w));
  nlohmann::json j{{"event", "summary"}, {"time_ms", ctx.end_ms}, {"exit_code", policy.exit_code()},
                   {"host", ctx.host}, {"node_rank", ctx.node_rank}, {"workers", workers}};
  // Preempted: by a notice (SIGUSR1) or by SIGTERM, here or on another node, the same outcome with no root
  // cause, as the text says.
  if (policy.preempted()) {
    j["preempted"] = true;
    if (policy.stop_signal() != 0) j["stopped_by_signal"] = process::signal_name(policy.stop_signal());
  } else if (const auto& cause = policy.job_cause()) {
    j["root_cause"] = {{"description", cause->text}, {"node_rank", cause->node_rank}, {"rank", cause->rank},
                       {"exit_code", cause->exit_code}, {"time_ms", cause->time_ms}};
    if (!cause->error.empty()) j["root_cause"]["error"] = cause->error;
  } else if (const WorkerRecord* root = policy.root_cause()) {
    j["root_cause"] = worker_json(*root);
    j["root_cause"]["host"] = ctx.host;
    j["root_cause"]["node_rank"] = ctx.node_rank;
  } else if (policy.stop_signal() != 0) {
    j["stopped_by_signal"] = process::signal_name(policy.stop_signal());
  }
  if (nlohmann::json tb = traceback_json(policy, ctx); !tb.is_null() && j.contains("root_cause"))
    j["root_cause"]["traceback"] = std::move(tb);
  if (!ctx.attempts.empty()) {
    nlohmann::json rounds = nlohmann::json::array();
    for (const Attempt& a : ctx.attempts)
      rounds.push_back({{"round", a.round}, {"nnodes", a.nnodes}, {"world_size", a.world_size}, {"cause", a.cause}});
    j["earlier_rounds"] = rounds;
  }
  if (!ctx.output_losses.empty()) j["output_lost"] = ctx.output_losses;
  for (const auto& d : ctx.nccl_dumps) j["nccl_dumps"].push_back({{"rank", d.rank}, {"file", d.file}});
  return j;
}

std::string label_lines(const std::string& text, const std::string& node) {
  if (node.empty()) return text;
  std::string out;
  out.reserve(text.size() + 16);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    out += "[" + node + "] ";
    out.append(text, start, end - start);
    start = end;
  }
  return out;
}

std::string summary_text(const SupervisionPolicy& policy, const SummaryContext& ctx) {
  std::ostringstream out;
  const WorkerRecord* root = policy.root_cause();
  const std::int64_t elapsed_ms = ctx.elapsed_ms >= 0 ? ctx.elapsed_ms : ctx.end_ms - ctx.start_ms;
  const double secs = static_cast<double>(elapsed_ms) / 1000.0;
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.3f s", secs);
  const auto& cause = policy.job_cause();
  // Preempted first: a SIGTERM that reached another node first is the rendezvous' cause, yet every worker here
  // stopped cleanly and the exit code is kExitPreempted, so the job did not fail.
  if (policy.preempted()) {
    out << "ddprun: job preempted after " << elapsed << ": a stop notice came and every worker exited 0; exit "
        << "code " << kExitPreempted << " asks the batch script to requeue\n";
  } else if (cause) {
    // The job's root cause, possibly on another node: the same lines on every node.
    out << "ddprun: job FAILED after " << elapsed << "\n";
    out << "ddprun: root cause: " << cause->text;
    if (cause->time_ms > 0) out << " at " << iso_time(cause->time_ms);
    out << "\n";
    if (!cause->error.empty()) out << "ddprun: root cause error: " << cause->error << "\n";
    root = root_worker_here(policy, ctx);
  } else if (root) {
    out << "ddprun: job FAILED after " << elapsed << "\n";
    out << "ddprun: root cause: rank " << root->rank << " (local rank " << root->local_rank << ", node "
        << ctx.node_rank << ", host " << ctx.host;
    if (root->pid == 0) out << ") could not be started (" << root->status.describe() << ")";
    else out << ", pid " << root->pid << ") " << root->status.describe();
    if (!root->reason.empty()) out << ": " << root->reason;
    out << " at " << iso_time(root->end_ms) << "\n";
    if (!root->error_message.empty()) out << "ddprun: root cause error: " << root->error_message << "\n";
  } else if (policy.stop_signal() != 0) {
    out << "ddprun: job stopped by " << process::signal_name(policy.stop_signal()) << " after " << elapsed << "\n";
  } else if (policy.exit_code() != 0) {
    out << "ddprun: job stopped after " << elapsed << "\n";
  } else {
    if (policy.workers().empty())  // an elastic job's late joiner: the job completed before its next round
      out << "ddprun: the job completed after " << elapsed << "; no worker ran on this node\n";
    else if (policy.workers().size() == 1)
      out << "ddprun: the worker succeeded in " << elapsed << "\n";
    else
      out << "ddprun: all " << policy.workers().size() << " workers succeeded in " << elapsed << "\n";
    append_attempts(out, ctx.attempts);
    append_output_losses(out, ctx.output_losses);
    return out.str();
  }
  for (const auto& w : policy.workers()) {
    char line[512];
    // Each end is a wall-clock time: within the job's monotonic length, whatever a clock step did meanwhile.
    const double at = static_cast<double>(std::clamp<std::int64_t>(w.end_ms - ctx.start_ms, 0, elapsed_ms)) / 1000.0;
    // A worker that could not be started has no pid: "-", and its status says so (the reason is above).
    const bool never_ran = w.pid == 0 && w.state != WorkerState::kRunning;
    const std::string pid = never_ran ? "-" : std::to_string(w.pid);
    const std::string status = never_ran ? "not started: " + w.status.describe() : w.status.describe();
    std::snprintf(line, sizeof line, "ddprun:   rank %-4d local %-3d pid %-8s %-9s %-26s +%.3fs%s\n", w.rank,
                  w.local_rank, pid.c_str(), to_string(w.state), status.c_str(), at,
                  &w == root ? "  <- root cause" : "");
    out << line;
  }
  if (root) append_root_detail(out, *root, ctx);
  append_attempts(out, ctx.attempts);
  append_output_losses(out, ctx.output_losses);
  for (const auto& d : ctx.nccl_dumps)
    out << "ddprun: NCCL Flight Recorder dump of rank " << d.rank << " in " << d.file << "\n";
  if (!ctx.log_root.empty()) out << "ddprun: logs in " << ctx.log_root << "\n";
  out << "ddprun: exit code " << policy.exit_code() << "\n";
  return out.str();
}

}  // namespace ddprun::agent
