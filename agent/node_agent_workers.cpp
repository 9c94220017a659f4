// Starting workers (env contract, output routing) and signalling them: the agent's hands on processes.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <system_error>

#include "agent/node_agent_impl.hpp"
#include "common/error.hpp"
#include "common/process/process_tree.hpp"
#include "common/process/spawn.hpp"
#include "common/time.hpp"
#include "common/timeouts.hpp"
#include "rendezvous/text.hpp"

namespace ddprun::agent {
using nlohmann::json;
namespace {
// What ran out, and what to do about it, in one line.
std::string resource_advice(int err, const std::string& what) {
  struct rlimit lim {};
  switch (err) {
    case EMFILE:
      ::getrlimit(RLIMIT_NOFILE, &lim);
      return what + ": this process may open only " + std::to_string(lim.rlim_cur) +
             " files (ulimit -n); ddprun needs up to 4 per worker: raise it (ulimit -n 65536) or start fewer workers";
    case ENFILE:
      return what + ": the system's table of open files is full (fs.file-max): close files or raise the limit";
    case EAGAIN:
      ::getrlimit(RLIMIT_NPROC, &lim);
      return what + ": no more processes for this user (ulimit -u is " + std::to_string(lim.rlim_cur) +
             "): raise it or start fewer workers";
    case ENOMEM:
      return what + ": out of memory";
    default:
      return what;
  }
}
}  // namespace

void NodeAgent::start_workers() {
  const World& w = world_;
  // Logged when workers start, not while the command line is read: a refused command line stays one line.
  if (!config_.python.empty() && w.restart_count == 0)
    log_.info("Python interpreter: ", config_.python, " (", config_.python_origin, ")");
  if (heartbeats_.enabled()) heartbeats_.clear();  // no beat of a previous round counts in this one
  workers_attempt_ = w.restart_count;
  reforms_announced_ = 0;
  hang_.start_round();
  watch_error_files();
  oom_kills_seen_ = oom_.kills();
  // The first worker that cannot be started stops the loop (the next ones would fail the same way); it is
  // handled once the line saying what started is out, so the log reads in order: started, why one did not,
  // tearing down.
  std::optional<StartFailure> failed;
  // Every worker is forked before any exec is waited for: they exec side by side on every core (issue 35's launch
  // profile: one after another, the waits were most of a launch). Then each is registered in local rank order.
  std::vector<StartingWorker> starting;
  for (int lr = 0; lr < w.local_world_size && !failed; ++lr) {
    if (policy_.phase() != Phase::kRunning) break;  // a signal already stopped the job
    starting.push_back(begin_worker(lr));
    failed = starting.back().failure;
  }
  std::vector<StartFailure> more;  // exec failures after the first (the same program: usually every one)
  for (StartingWorker& sw : starting) {
    std::optional<StartFailure> f = finish_worker(sw);
    if (!f) continue;
    if (!failed) failed = f;
    else if (f->local_rank != failed->local_rank) more.push_back(*f);  // not the one that stopped the forking
  }
  const std::size_t started = local_rank_of_.size();
  const std::string how_many = started == static_cast<std::size_t>(w.local_world_size)
                                   ? std::to_string(started)
                                   : std::to_string(started) + " of " + std::to_string(w.local_world_size);
  log_.info("started ", how_many, w.local_world_size == 1 ? " worker" : " workers", ": ", ranks_text(w), " of ",
            w.world_size, " (node ", w.node_rank, " of ", w.nnodes,
            "), master ", rendezvous::text::host_port(w.master_addr, w.master_port), ", run id ", w.run_id, ", attempt ", w.restart_count);
  if (failed) {
    WorkerRecord& r = policy_.worker(failed->local_rank);
    log_.error("rank ", r.rank, " could not be started: ", failed->reason);
    r.reason = failed->reason;
    const Decision d = policy_.on_exit(failed->local_rank, failed->status, unix_ms());
    if (d.teardown_began) report_worker_failure(failed->local_rank);
    for (const StartFailure& f : more) {  // victims of the first: the teardown began with it
      policy_.worker(f.local_rank).reason = f.reason;
      policy_.on_exit(f.local_rank, f.status, unix_ms());
    }
    apply(d, "worker_failed");
  }
  // Not one worker could start (out of descriptors, processes, memory): no exit will ever be reaped, so the
  // round's end is looked for now, once this handler is done.
  if (started == 0) boost::asio::post(io_, [this] { reaper_.reap_now(); });
  hang_.watch();
}

// The round's error files (agent/error_file_watch.hpp), watched from kErrorFileWatchDelay on: a file written
// before then is read when the watch begins.
void NodeAgent::watch_error_files() {
  std::vector<std::string> files;
  for (int lr = 0; lr < world_.local_world_size; ++lr) files.push_back(layout_.error_file(workers_attempt_, lr));
  errors_.watch(files, timeouts::kErrorFileWatchDelay);
}

// What the plan of a worker (agent/worker_plan.hpp) needs to know of this process and this round's files.
WorkerFacts NodeAgent::worker_facts(int local_rank, const OutputRouting::Target& stdout_target) const {
  const int attempt = world_.restart_count;
  WorkerFacts facts;
  facts.agent_pid = ::getpid();
  facts.job_tag = guard_.tag();
  facts.cgroup_procs_fd = cgroup_.procs_fd();
  facts.cgroup_dir_fd = cgroup_.dir_fd();
  facts.stdin_is_foreground_terminal = world_.rank_offset + local_rank == config_.stdin_rank &&
                                       ::isatty(STDIN_FILENO) == 1 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  // Only when stdout goes to the terminal alone: a bar's '\r' redraws have no place in a --tee file.
  facts.stdout_to_terminal_only = stdout_target.console && !stdout_target.file && ::isatty(STDOUT_FILENO) == 1;
  facts.error_file = layout_.error_file(attempt, local_rank);
  if (heartbeats_.enabled()) {
    facts.heartbeat_fd = heartbeats_.fd();
    facts.reform_file = layout_.reform_file(attempt, local_rank);
  }
  if (config_.hang_timeout.count() > 0) {
    facts.stacks_file = hang_.stacks_file(local_rank);
    facts.stacks_signal = python_stacks_signal();
    facts.flight_recorder_prefix = hang_.flight_recorder_prefix(local_rank);
  }
  return facts;
}

NodeAgent::StartingWorker NodeAgent::begin_worker(int local_rank) {
  const World& w = world_;
  StartingWorker sw;
  sw.local_rank = local_rank;
  sw.routes[0].target = output_.target_of(local_rank, kStdout);
  sw.routes[1].target = output_.target_of(local_rank, kStderr);
  int null_fd = -1;
  Pipe pipes[2];
  // Out of a resource (open files, processes, memory): this rank fails to start with
  // exit code 71, the job is torn down like after any failure, and the line says what ran out and what to do.
  auto cannot_start = [&](int err, const char* what) {
    sw.failure = StartFailure{local_rank, {}, resource_advice(err, what)};
    sw.failure->status.code = kExitOsError;
    for (Pipe& p : pipes) {
      if (p.read_fd >= 0) ::close(p.read_fd);
      p.read_fd = -1;
    }
  };
  process::SpawnOptions opts = plan_worker(config_, w, local_rank, worker_facts(local_rank, sw.routes[0].target));
  try {
    for (int i = 0; i < 2; ++i) {
      if (sw.routes[i].target.any()) {
        pipes[i] = make_output_pipe();
      } else {
        if (null_fd < 0) null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        pipes[i].write_fd = null_fd;
      }
    }
    opts.stdout_fd = pipes[0].write_fd;
    opts.stderr_fd = pipes[1].write_fd;
    sw.child = process::spawn_start(opts);
  } catch (const SystemError& e) {  // our pipes
    cannot_start(e.error_number(), e.what());
  } catch (const std::system_error& e) {  // spawn's fork (ddprun_process throws the standard type)
    cannot_start(e.code().value(), e.what());
  }
  // The child has its copies; ours must go, or the pipes would never reach end of file.
  for (Pipe& p : pipes)
    if (p.write_fd >= 0 && p.write_fd != null_fd) ::close(p.write_fd);
  if (null_fd >= 0) ::close(null_fd);
  for (int i = 0; i < 2; ++i) sw.routes[i].read_fd = pipes[i].read_fd;
  return sw;
}

std::optional<NodeAgent::StartFailure> NodeAgent::finish_worker(StartingWorker& sw) {
  const World& w = world_;
  const int local_rank = sw.local_rank;
  const int rank = w.rank_offset + local_rank;
  std::optional<StartFailure> failure = sw.failure;
  pid_t pid = 0;
  if (!failure) {
    try {
      pid = process::spawn_finish(sw.child);
    } catch (const process::ExecError& e) {
      failure = StartFailure{local_rank, {}, e.what()};
      failure->status.code = e.exit_code();
    }
  }
  for (int i = 0; i < 2; ++i) {
    const int bit = i == 0 ? kStdout : kStderr;
    if (sw.routes[i].read_fd >= 0)
      output_.add_stream(rank, local_rank, bit, sw.routes[i].read_fd, sw.routes[i].target,
                         bit == kStdout ? layout_.stdout_file(w.restart_count, local_rank)
                                        : layout_.stderr_file(w.restart_count, local_rank));
  }
  const std::int64_t now = unix_ms();
  policy_.add_worker(rank, local_rank, pid, now);
  if (failure) return failure;  // start_workers reports it, after saying what did start
  local_rank_of_[pid] = local_rank;
  guard_.watch_group(pid);  // spawn made the worker its group's leader
  log_.debug("rank ", rank, " started, pid ", pid);
  events_.write(json{{"event", "started"}, {"time_ms", now}, {"rank", rank}, {"local_rank", local_rank},
                     {"pid", pid}, {"node_rank", w.node_rank}});
  return std::nullopt;
}

// A worker's SIGKILL that ddprun did not send: the OOM killer's when the memory cgroup counted a kill since
// the last one put on a worker (each kill explains one death). Empty when it did not, or cannot be known.
std::string NodeAgent::oom_kill_reason() {
  const long long kills = oom_.kills();
  if (kills < 0 || oom_kills_seen_ < 0 || kills <= oom_kills_seen_) return {};
  ++oom_kills_seen_;
  return "killed by the kernel's OOM killer: " + oom_.limit();
}

void NodeAgent::signal_everything(int signal, bool include_descendants) {
  // A stopped process (SIGSTOP, Ctrl-Z, a debugger) cannot act on SIGTERM until it runs again: a stop
  // signal is followed by SIGCONT, so it gets its grace period like everyone else (as systemd does).
  const bool wake = is_stop_signal(signal);
  // Every descendant and its group, taken *before* the groups are signalled: a process that calls setsid
  // while we signal must not get the group's signal and then the sweep's as well. (One that leaves its
  // group in the instant between this snapshot and killpg gets neither, and SIGKILL at the end of the
  // grace period: at most one SIGTERM, never two.)
  std::vector<std::pair<pid_t, pid_t>> descendants;
  if (include_descendants)
    for (pid_t pid : process::descendants_of(::getpid())) descendants.emplace_back(pid, ::getpgid(pid));
  // Only the groups of workers still running: a reaped worker's pid (its group id) may be reused.
  std::vector<pid_t> signalled_groups;
  for (const WorkerRecord& w : policy_.workers())
    if (w.state == WorkerState::kRunning && w.pid > 0 && process::signal_group(w.pid, signal)) {
      signalled_groups.push_back(w.pid);
      if (wake) process::signal_group(w.pid, SIGCONT);
    }
  // Descendants that left their worker's group (setsid, daemonised) or outlived their worker.
  std::vector<pid_t> escaped;
  for (const auto& [pid, group] : descendants)
    if (std::find(signalled_groups.begin(), signalled_groups.end(), group) == signalled_groups.end())
      escaped.push_back(pid);
  process::signal_each(escaped, signal);
  if (wake) process::signal_each(escaped, SIGCONT);
}

}  // namespace ddprun::agent
