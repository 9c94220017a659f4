#include "agent/slurm_end_query.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <sstream>

#include "common/process/spawn.hpp"
#include "common/time.hpp"

namespace ddprun::agent {
namespace {

// The value of "Key=" in one of scontrol's one-line records: up to the next " Word=" (SLURM's Reason may hold
// spaces: "Reason=Not responding [slurm@2026-12-07T07:06:51]"); "" when absent.
std::string field(const std::string& line, const std::string& key) {
  std::size_t from;
  if (line.compare(0, key.size() + 1, key + "=") == 0) {
    from = key.size() + 1;
  } else {
    const std::size_t at = line.find(' ' + key + '=');
    if (at == std::string::npos) return {};
    from = at + key.size() + 2;
  }
  for (std::size_t space = line.find(' ', from); space != std::string::npos; space = line.find(' ', space + 1)) {
    const std::size_t eq = line.find('=', space + 1);
    if (eq != std::string::npos && eq < line.find(' ', space + 1)) return line.substr(from, space - from);
  }
  return line.substr(from);
}

// "[slurm@2026-12-07T07:06:51]" at the end of a node's Reason: who set it and when, not why.
std::string without_stamp(std::string reason) {
  const std::size_t bracket = reason.rfind(" [");
  if (bracket != std::string::npos && !reason.empty() && reason.back() == ']') reason.erase(bracket);
  return reason;
}

}  // namespace

std::optional<std::string> node_failure_in(const std::string& scontrol_output) {
  std::string job_state, down;
  std::istringstream lines(scontrol_output);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, 6, "JobId=") == 0) {
      job_state = field(line, "JobState");
    } else if (line.compare(0, 9, "NodeName=") == 0) {
      const std::string state = field(line, "State");
      // DOWN, DOWN+NOT_RESPONDING, FAIL, FAILING+DRAIN...: the node is out; DRAIN alone is an admin's plan.
      if (state.find("DOWN") == std::string::npos && state.find("FAIL") == std::string::npos) continue;
      std::string name = field(line, "NodeName");
      const std::string reason = without_stamp(field(line, "Reason"));
      const std::string base = state.substr(0, state.find('+'));
      if (!down.empty()) down += ", ";
      down += name + " is " + base + (reason.empty() || reason == "(null)" ? "" : " (" + reason + ")");
    }
  }
  // The job's own end says otherwise: a node down beside a preemption or a scancel is not why this stop came.
  if (job_state == "PREEMPTED" || job_state == "CANCELLED" || job_state == "TIMEOUT" || job_state == "DEADLINE")
    return std::nullopt;
  if (job_state != "NODE_FAIL" && down.empty()) return std::nullopt;
  // While its nodes are still being cleaned up the job shows COMPLETING, not NODE_FAIL: the down node says it.
  return "SLURM ended the job for a node failure" + (down.empty() ? " (JobState=NODE_FAIL)" : ": " + down);
}

SlurmEndQuery::~SlurmEndQuery() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);  // reaped by the agent's reaper, or by init once ddprun is gone
  if (out_fd_ >= 0) ::close(out_fd_);
}

void SlurmEndQuery::ask(const std::string& job_id, const std::string& nodes, const std::vector<std::string>& env,
                        Done done) {
  if (asked_ || job_id.empty()) return;
  asked_ = true;
  out_fd_ = ::memfd_create("ddprun-scontrol", MFD_CLOEXEC);
  if (out_fd_ < 0) return;
  process::SpawnOptions opts;
  opts.program = "/bin/sh";
  // Two records, one run: the job's state, then its nodes' (which of them is down, and SLURM's reason).
  opts.argv = {"sh", "-c", "scontrol -o show job \"$1\"; [ -n \"$2\" ] && scontrol -o show node \"$2\"", "sh",
               job_id, nodes};
  opts.env = env;
  opts.stdout_fd = out_fd_;
  opts.stderr_fd = out_fd_;
  try {
    pid_ = process::spawn(opts);
  } catch (const std::exception& e) {
    log_.debug("cannot ask slurmctld why the step was stopped: ", e.what());
    return;
  }
  done_ = std::move(done);
  log_.debug("asking slurmctld why the step was stopped (scontrol, pid ", pid_, ")");
  timer_.expires_after(kLimit);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || pid_ <= 0) return;
    log_.info("slurmctld did not say within ", kLimit.count() / 1000, " s why the step was stopped");
    ::kill(pid_, SIGKILL);  // its exit comes through on_child_exit
  });
}

bool SlurmEndQuery::on_child_exit(pid_t pid) {
  if (pid_ <= 0 || pid != pid_) return false;
  pid_ = 0;
  timer_.cancel();
  finish();
  return true;
}

void SlurmEndQuery::finish() {
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(out_fd_, buf, sizeof buf, at);
    if (n <= 0 || text.size() > (1u << 20)) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  ::close(out_fd_);
  out_fd_ = -1;
  log_.debug("slurmctld: ", text);
  const std::optional<std::string> failure = node_failure_in(text);
  std::optional<supervision::JobCause> cause;
  if (failure) {
    // A lost node, exit 1 on every node (each asks and hears the same), never "preempted".
    log_.warning(*failure, ": a lost node, not a preemption");
    cause = supervision::JobCause{};
    cause->text = *failure;
    cause->exit_code = 1;
    cause->time_ms = unix_ms();
  }
  if (done_) done_(cause);
}

}  // namespace ddprun::agent
