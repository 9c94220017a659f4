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
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "common/process/ports.hpp"
#include "common/process/process_tree.hpp"
#include "common/process/spawn.hpp"
#include "common/process/wait_status.hpp"
#include "worker_sdk/error.hpp"
#include "worker_sdk/error_file.hpp"

extern char** environ;

namespace ddprun::sdk {
namespace {

namespace proc = ddprun::process;
using Clock = std::chrono::steady_clock;

int free_port(const std::string& addr) {
  const int port = proc::probe_tcp_port(addr, 0);
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

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Pulls "message" out of torchelastic's error file without a JSON library: the first "message" value
// that is a string, unescaped enough for a one-line report.
std::string error_message(const std::string& json) {
  auto key = json.find("\"message\": \"");
  if (key == std::string::npos) return {};
  std::string out;
  for (size_t i = key + 12; i < json.size() && json[i] != '"'; ++i) {
    if (json[i] == '\\' && i + 1 < json.size()) {
      char c = json[++i];
      out += c == 'n' ? ' ' : c;
    } else {
      out += json[i];
    }
  }
  return out;
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int pidfd = -1;  // readable once the worker has ended
  std::string error_file;
};

class Supervisor {
 public:
  Supervisor(const std::vector<std::string>& argv, const SpawnOptions& options);
  ~Supervisor();
  int run();

 private:
  void start_all();
  void stop_all(int signal);
  void on_exit(pid_t pid, int status);

  std::vector<std::string> argv_;
  SpawnOptions options_;
  std::string tmp_dir_;
  std::vector<Worker> workers_;
  sigset_t handled_{};
  sigset_t previous_mask_{};
  int signal_fd_ = -1;
  bool stopping_ = false;
  int exit_code_ = 0;
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
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, sig);
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
    std::map<std::string, std::string> contract = {
        {"RANK", std::to_string(rank)}, {"LOCAL_RANK", std::to_string(rank)}, {"WORLD_SIZE", n},
        {"LOCAL_WORLD_SIZE", n}, {"GROUP_RANK", "0"}, {"GROUP_WORLD_SIZE", "1"},
        {"ROLE_RANK", std::to_string(rank)}, {"ROLE_NAME", "default"}, {"ROLE_WORLD_SIZE", n},
        {"MASTER_ADDR", options_.master_addr}, {"MASTER_PORT", std::to_string(options_.master_port)},
        {"TORCHELASTIC_RESTART_COUNT", "0"}, {"TORCHELASTIC_MAX_RESTARTS", "0"},
        {"TORCHELASTIC_RUN_ID", "embedded-" + std::to_string(::getpid())},
        {"TORCHELASTIC_ERROR_FILE", w.error_file}, {"DDPRUN_EMBEDDED", "1"}};
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

void Supervisor::on_exit(pid_t pid, int status) {
  for (auto& w : workers_) {
    if (w.pid != pid || !w.running) continue;
    w.running = false;
    auto st = proc::decode_wait_status(status);
    if (st.success() || stopping_) return;  // a victim of the teardown is not a root cause
    exit_code_ = st.shell_code();
    std::string message = error_message(read_file(w.error_file));
    std::cerr << "ddprun spawn: rank " << w.rank << " (pid " << pid << ") failed with " << st.describe()
              << (message.empty() ? "" : ": " + message) << "; stopping the other workers" << std::endl;
    stopping_ = true;
    kill_at_ = Clock::now() + options_.term_timeout;
    stop_all(SIGTERM);
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
    if (stopping_) {
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
      stop_all(SIGKILL);
      kill_at_ = Clock::now() + std::chrono::hours(1);
      continue;
    }
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int sig = static_cast<int>(info.ssi_signo);
      if (!stopping_) {
        exit_code_ = 128 + sig;
        stopping_ = true;
        kill_at_ = Clock::now() + options_.term_timeout;
      }
      stop_all(SIGTERM);
    }
    // Reap every child that has ended (escaped orphans re-parented to us included).
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) on_exit(pid, status);
  }
  return exit_code_;
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
