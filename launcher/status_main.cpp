// ddprun-status: the live view of this user's ddprun jobs on this node, from another terminal (README "Watching
// a job"). Each job's agent answers on its private Unix socket (agent/status_socket.hpp) with every rank of the
// job, this node's fresh and the other nodes' as the rendezvous last heard them (at most kStatusPeriod old).
//
//   ddprun-status [--run-id ID] [--json] [--watch] [--interval SEC]
//
// Exit 0 with the view (also when no job runs: an empty table or []); 64 for bad options.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/status_socket.hpp"
#include "common/exit_codes.hpp"
#include "common/time.hpp"
#include "common/version.hpp"
#include "launcher/status_view.hpp"

using nlohmann::json;

namespace {

struct JobSocket {
  std::string path;
  std::string run_id;
  long pid = 0;
};

// <run id>.<pid>.sock: the run id may hold dots; the pid is the last field.
std::vector<JobSocket> job_sockets(const std::string& dir) {
  std::vector<JobSocket> found;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return found;
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".sock") != 0) continue;
    name.resize(name.size() - 5);
    const auto dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0) continue;
    JobSocket s{dir + "/" + name + ".sock", name.substr(0, dot), std::atol(name.c_str() + dot + 1)};
    if (s.pid > 0) found.push_back(s);
  }
  ::closedir(d);
  return found;
}

// The agent's document, or nullopt when nobody answers (a socket left by a process that is gone is removed).
// Non-blocking: a socket whose queue is full (its process stopped or wedged) fails the connect with EAGAIN at once
// instead of holding ddprun-status for good (issue 33); the answer is waited for at most 5 s.
std::optional<json> ask(const JobSocket& s) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, s.path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (::kill(static_cast<pid_t>(s.pid), 0) != 0 && errno == ESRCH) ::unlink(s.path.c_str());
    ::close(fd);
    return std::nullopt;
  }
  const std::string request = "view\n";
  if (::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string reply;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char buf[65536];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) break;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  json doc = json::parse(reply, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("nodes")) return std::nullopt;
  doc["pid"] = s.pid;
  return doc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the live view of this user's ddprun jobs on this node: every rank's state, step, step rate, last "
               "beat, CPU and memory, on every node of the job"};
  app.set_version_flag("--version", std::string("ddprun-status ") + ddprun::kVersion);
  std::string run_id;
  bool as_json = false, watch = false;
  double interval = 2;
  app.add_option("--run-id", run_id, "only the job with this run id (TORCHELASTIC_RUN_ID)");
  app.add_flag("--json", as_json, "one JSON document: an array of jobs, each {pid, complete, nodes: [...]}");
  app.add_flag("-w,--watch", watch, "redraw every --interval seconds until interrupted");
  app.add_option("--interval", interval, "seconds between redraws with --watch")->check(CLI::Range(0.2, 3600.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : ddprun::kExitUsage;
  }
  std::string problem;
  const std::string dir = ddprun::agent::status_directory(problem);
  if (dir.empty()) {
    std::cerr << "ddprun-status: " << problem << "\n";
    return ddprun::kExitCantCreate;
  }
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  for (;;) {
    json jobs = json::array();
    for (const JobSocket& s : job_sockets(dir))
      if (run_id.empty() || s.run_id == run_id || s.run_id == ddprun::agent::status_run_name(run_id))
        if (auto doc = ask(s)) jobs.push_back(std::move(*doc));
    std::string screen;
    if (as_json) {
      // ASCII only: another node's bidirectional controls and zero-width characters, like its control characters,
      // travel as \u escapes that any JSON reader decodes, never raw onto a terminal (issue 55).
      screen = jobs.dump(-1, ' ', /*ensure_ascii=*/true) + "\n";
    } else if (jobs.empty()) {
      screen = "no ddprun job" + (run_id.empty() ? std::string() : " with run id " + run_id) +
               " of this user runs on this node\n";
    } else {
      for (std::size_t i = 0; i < jobs.size(); ++i)
        screen += (i ? "\n" : "") + ddprun::launcher::render_job(jobs[i], ddprun::unix_ms());
    }
    if (watch && tty && !as_json) std::cout << "\033[H\033[2J";
    std::cout << screen << std::flush;
    if (!watch) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    if (!tty || as_json) std::cout << "\n";
  }
}
