#include "agent/worker_launcher.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "agent/hang_inquiry.hpp"
#include "agent/heartbeat_channel.hpp"
#include "agent/job_containment.hpp"
#include "agent/output_pump.hpp"
#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "common/process/spawn.hpp"

namespace ddprun::agent {

WorkerFacts worker_facts(const FactSources& from, int local_rank, const OutputRouting::Target& stdout_target) {
  const int attempt = from.world.restart_count;
  WorkerFacts facts;
  facts.agent_pid = ::getpid();
  facts.job_tag = from.containment.guard().tag();
  facts.cgroup_procs_fd = from.containment.cgroup().procs_fd();
  facts.cgroup_dir_fd = from.containment.cgroup().dir_fd();
  facts.guard_fd = from.containment.guard().command_fd();
  facts.stdin_is_foreground_terminal = from.world.rank_offset + local_rank == from.config.stdin_rank &&
                                       ::isatty(STDIN_FILENO) == 1 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  // Only when stdout goes to the terminal alone: a bar's '\r' redraws have no place in a --tee file.
  facts.stdout_to_terminal_only = stdout_target.console && !stdout_target.file && ::isatty(STDOUT_FILENO) == 1;
  facts.error_file = from.layout.error_file(attempt, local_rank);
  if (from.heartbeats.enabled()) {
    facts.heartbeat_fd = from.heartbeats.fd();
    facts.reform_file = from.layout.reform_file(attempt, local_rank);
  }
  if (from.config.hang_timeout.count() > 0) {
    facts.stacks_file = from.hang.stacks_file(local_rank);
    facts.stacks_signal = python_stacks_signal();
    facts.flight_recorder_prefix = from.hang.flight_recorder_prefix(local_rank);
  }
  return facts;
}

// A worker forked (process::spawn_start), its exec not yet confirmed; or the resource it could not get.
struct WorkerLauncher::Starting {
  int local_rank = 0;
  struct Route {
    OutputRouting::Target target;
    int read_fd = -1;
  } routes[2];  // stdout, stderr
  process::StartedChild child;
  std::optional<StartFailure> failure;
};

std::size_t WorkerLauncher::Round::started() const {
  std::size_t n = 0;
  for (pid_t pid : pids) n += pid > 0;
  return n;
}

std::string WorkerLauncher::resource_advice(int err, const std::string& what) {
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

WorkerLauncher::WorkerLauncher(const AgentConfig& config, const World& world, const RunLayout& layout,
                               OutputRouting& output, Host host)
    : config_(config), world_(world), layout_(layout), output_(output), host_(std::move(host)) {}

WorkerLauncher::Round WorkerLauncher::launch() {
  Round round;
  std::vector<Starting> starting;
  for (int lr = 0; lr < world_.local_world_size && !round.failed; ++lr) {
    if (!host_.may_fork()) break;
    starting.push_back(begin(lr));
    round.failed = starting.back().failure;
  }
  for (Starting& s : starting) {
    pid_t pid = 0;
    std::optional<StartFailure> f = finish(s, pid);
    round.pids.push_back(pid);
    if (!f) continue;
    if (!round.failed) round.failed = f;
    else if (f->local_rank != round.failed->local_rank) round.more.push_back(*f);  // not the one that stopped the forking
  }
  return round;
}

WorkerLauncher::Starting WorkerLauncher::begin(int local_rank) {
  Starting s;
  s.local_rank = local_rank;
  s.routes[0].target = output_.target_of(local_rank, kStdout);
  s.routes[1].target = output_.target_of(local_rank, kStderr);
  int null_fd = -1;
  Pipe pipes[2];
  // Out of a resource (open files, processes, memory): this rank fails to start with exit code 71, the job is
  // torn down like after any failure, and the line says what ran out and what to do.
  auto cannot_start = [&](int err, const char* what) {
    s.failure = StartFailure{local_rank, {}, resource_advice(err, what)};
    s.failure->status.code = kExitOsError;
    for (Pipe& p : pipes) {
      if (p.read_fd >= 0) ::close(p.read_fd);
      p.read_fd = -1;
    }
  };
  process::SpawnOptions opts = plan_worker(config_, world_, local_rank, host_.facts(local_rank, s.routes[0].target));
  try {
    for (int i = 0; i < 2; ++i) {
      if (s.routes[i].target.any()) {
        pipes[i] = make_output_pipe();
      } else {
        if (null_fd < 0) null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        pipes[i].write_fd = null_fd;
      }
    }
    opts.stdout_fd = pipes[0].write_fd;
    opts.stderr_fd = pipes[1].write_fd;
    s.child = process::spawn_start(opts);
  } catch (const SystemError& e) {  // our pipes
    cannot_start(e.error_number(), e.what());
  } catch (const std::system_error& e) {  // spawn's fork (ddprun_process throws the standard type)
    cannot_start(e.code().value(), e.what());
  }
  // The child has its copies; ours must go, or the pipes would never reach end of file.
  for (Pipe& p : pipes)
    if (p.write_fd >= 0 && p.write_fd != null_fd) ::close(p.write_fd);
  if (null_fd >= 0) ::close(null_fd);
  for (int i = 0; i < 2; ++i) s.routes[i].read_fd = pipes[i].read_fd;
  return s;
}

std::optional<WorkerLauncher::StartFailure> WorkerLauncher::finish(Starting& s, pid_t& pid) {
  const int local_rank = s.local_rank;
  const int rank = world_.rank_offset + local_rank;
  std::optional<StartFailure> failure = s.failure;
  if (!failure) {
    try {
      pid = process::spawn_finish(s.child);
    } catch (const process::ExecError& e) {
      failure = StartFailure{local_rank, {}, e.what()};
      failure->status.code = e.exit_code();
    }
  }
  for (int i = 0; i < 2; ++i) {
    const int bit = i == 0 ? kStdout : kStderr;
    if (s.routes[i].read_fd >= 0)
      output_.add_stream(rank, local_rank, bit, s.routes[i].read_fd, s.routes[i].target,
                         bit == kStdout ? layout_.stdout_file(world_.restart_count, local_rank)
                                        : layout_.stderr_file(world_.restart_count, local_rank));
  }
  return failure;
}

}  // namespace ddprun::agent
