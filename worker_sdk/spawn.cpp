#include "worker_sdk/spawn.hpp"

#include <poll.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>

#include "common/contract/worker_contract.hpp"
#include "common/process/ports.hpp"
#include "common/process/process_tree.hpp"
#include "common/process/spawn.hpp"
#include "common/process/wait_status.hpp"
#include "common/supervision/error_file.hpp"
#include "common/supervision/supervision_policy.hpp"
#include "common/time.hpp"
#include "worker_sdk/error.hpp"
#include "worker_sdk/error_file.hpp"

extern char** environ;

namespace ddprun::sdk {
namespace {

namespace proc = ddprun::process;
using Clock = std::chrono::steady_clock;

int free_port(const std::string& addr) {
  const int port = proc::pick_master_port(addr);
  if (port < 0) throw Error("cannot find a free port on " + addr + ": " + std::strerror(-port));
  return port;
}

// The environment of rank `rank`: ours, with the contract's variables replaced.
std::vector<std::string> worker_env(const std::map<std::string, std::string>& contract) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    if (contract.count(name) == 0) env.push_back(entry);
  }
  for (const auto& [name, value] : contract) env.push_back(name + "=" + value);
  return env;
}

namespace sv = ddprun::supervision;

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int pidfd = -1;  // readable once the worker has ended
  std::string error_file;
};

// The decisions (who is the root cause, which signal, when SIGKILL) are the node agent's own
// (common/supervision/supervision_policy.hpp); this class only applies them to its processes.

class Supervisor {
 public:
  Supervisor(const std::vector<std::string>& argv, const SpawnOptions& options);
  ~Supervisor();
  int run();

 private:
  void start_all();
  void stop_all(int signal);
  void apply(const sv::Decision& d);
  void on_exit(pid_t pid, int status);

  std::vector<std::string> argv_;
  SpawnOptions options_;
  std::string tmp_dir_;
  std::vector<Worker> workers_;
  sigset_t handled_{};
  sigset_t previous_mask_{};
  int signal_fd_ = -1;
  sv::SupervisionPolicy policy_;
  bool grace_armed_ = false;
  Clock::time_point kill_at_{};
};

Supervisor::Supervisor(const std::vector<std::string>& argv, const SpawnOptions& options)
    : argv_(argv), options_(options) {
  DDPRUN_SDK_CHECK(options_.nproc >= 1, "spawn: nproc must be at least 1");
  DDPRUN_SDK_CHECK(!argv_.empty(), "spawn: empty argv");
  if (options_.program.empty()) options_.program = "/proc/self/exe";
  if (options_.master_port == 0) options_.master_port = free_port(options_.master_addr);
  char tmpl[] = "/tmp/ddprun-spawn-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw Error(std::string("mkdtemp: ") + std::strerror(errno));
  tmp_dir_ = tmpl;
  // Stop requests become events on a descriptor. A worker's end is seen through its pidfd, not SIGCHLD:
  // in a multithreaded program (LibTorch starts threads) a process-directed SIGCHLD may be delivered to
  // another thread, where it is discarded, and the supervisor would wait forever.
  sigemptyset(&handled_);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&handled_, sig);
  ::pthread_sigmask(SIG_BLOCK, &handled_, &previous_mask_);
  signal_fd_ = ::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) throw Error(std::string("signalfd: ") + std::strerror(errno));
  // Orphans of a worker (double forks) are re-parented to us, so the final sweep can find them.
  proc::become_child_subreaper();
}

Supervisor::~Supervisor() {
  // Nothing outlives the supervisor: stragglers and escaped descendants are killed and reaped.
  for (auto& w : workers_) {
    if (w.running) proc::signal_group(w.pid, SIGKILL);
  }
  proc::signal_each(proc::descendants_of(::getpid()), SIGKILL);
  while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
  }
  for (auto& w : workers_) {
    ::unlink(w.error_file.c_str());
    if (w.pidfd >= 0) ::close(w.pidfd);
  }
  ::rmdir(tmp_dir_.c_str());
  if (signal_fd_ >= 0) ::close(signal_fd_);
  ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

void Supervisor::start_all() {
  const std::string n = std::to_string(options_.nproc);
  for (int rank = 0; rank < options_.nproc; ++rank) {
    Worker w;
    w.rank = rank;
    w.error_file = tmp_dir_ + "/error-" + std::to_string(rank) + ".json";
    namespace c = ddprun::contract;
    std::map<std::string, std::string> contract = {
        {c::kRank, std::to_string(rank)}, {c::kLocalRank, std::to_string(rank)}, {c::kWorldSize, n},
        {c::kLocalWorldSize, n}, {c::kGroupRank, "0"}, {c::kGroupWorldSize, "1"},
        {c::kRoleRank, std::to_string(rank)}, {c::kRoleName, "default"}, {c::kRoleWorldSize, n},
        {c::kMasterAddr, options_.master_addr}, {c::kMasterPort, std::to_string(options_.master_port)},
        {c::kRestartCount, "0"}, {c::kMaxRestarts, "0"}, {c::kRunId, "embedded-" + std::to_string(::getpid())},
        {c::kErrorFile, w.error_file}, {c::kEmbedded, "1"}};
    if (options_.nproc > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) contract["OMP_NUM_THREADS"] = "1";
    proc::SpawnOptions so;
    so.program = options_.program;
    so.argv = argv_;
    so.env = worker_env(contract);
    so.stdin_fd = rank == 0 ? 0 : -1;
    try {
      w.pid = proc::spawn(so);
    } catch (const std::exception& e) {
      stop_all(SIGKILL);
      throw Error("spawn: cannot start rank " + std::to_string(rank) + ": " + e.what());
    }
    w.running = true;
    policy_.add_worker(rank, rank, w.pid, unix_ms());
    w.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, w.pid, 0));
    if (w.pidfd < 0) {
      workers_.push_back(w);
      stop_all(SIGKILL);
      throw Error(std::string("pidfd_open (Linux >= 5.3 needed): ") + std::strerror(errno));
    }
    workers_.push_back(w);
  }
}

void Supervisor::stop_all(int signal) {
  for (auto& w : workers_) {
    if (w.running) proc::signal_group(w.pid, signal);
  }
}

void Supervisor::apply(const sv::Decision& d) {
  if (d.signal_all != 0) stop_all(d.signal_all);
  if (d.arm_grace && !grace_armed_) {
    grace_armed_ = true;
    kill_at_ = Clock::now() + options_.term_timeout;
  }
}

void Supervisor::on_exit(pid_t pid, int status) {
  for (auto& w : workers_) {
    if (w.pid != pid || !w.running) continue;
    w.running = false;
    const auto st = proc::decode_wait_status(status);
    if (!st.success()) {
      const sv::ErrorFileContents ef = sv::read_error_file(w.error_file);
      if (ef.present) policy_.worker(w.rank).error_message = ef.message;
    }
    const sv::Decision d = policy_.on_exit(w.rank, st, unix_ms());
    const sv::WorkerRecord& r = policy_.worker(w.rank);
    if (d.teardown_began && r.state == sv::WorkerState::kFailed)
      std::cerr << "ddprun spawn: rank " << w.rank << " (pid " << pid << ") failed with " << st.describe()
                << (r.error_message.empty() ? "" : ": " + r.error_message) << "; stopping the other workers"
                << std::endl;
    apply(d);
    return;
  }
}

int Supervisor::run() {
  start_all();
  auto live = [&] {
    for (auto& w : workers_) {
      if (w.running) return true;
    }
    return false;
  };
  while (live()) {
    int timeout_ms = -1;
    if (grace_armed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at_ - Clock::now()).count();
      timeout_ms = left > 0 ? static_cast<int>(left) : 0;
    }
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    for (auto& w : workers_) {
      if (w.running) fds.push_back({w.pidfd, POLLIN, 0});
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) throw Error(std::string("poll: ") + std::strerror(errno));
    if (rc == 0) {  // grace period over
      apply(policy_.on_grace_expired(unix_ms()));
      grace_armed_ = false;
      kill_at_ = Clock::now() + std::chrono::hours(1);
      continue;
    }
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      apply(policy_.on_signal(static_cast<int>(info.ssi_signo), unix_ms()));
    // Reap every child that has ended (escaped orphans re-parented to us included).
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) on_exit(pid, status);
  }
  return policy_.exit_code();
}

}  // namespace

int spawn_workers(const std::vector<std::string>& argv, const SpawnOptions& options) {
  Supervisor supervisor(argv, options);
  return supervisor.run();
}

int launch(int argc, char** argv, const SpawnOptions& options, const std::function<int(const WorldInfo&)>& worker) {
  if (WorldInfo::present_in_env()) {
    return run_main([&] { return worker(WorldInfo::from_env()); });
  }
  return run_main([&] { return spawn_workers(std::vector<std::string>(argv, argv + argc), options); });
}

}  // namespace ddprun::sdk
