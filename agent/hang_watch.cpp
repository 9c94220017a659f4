#include "agent/hang_watch.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "agent/exit_summary.hpp"

namespace ddprun::agent {

std::int64_t discovery_period_ns(std::int64_t timeout_ns) {
  return std::clamp<std::int64_t>(timeout_ns / 4, 10'000'000, 1'000'000'000);
}

HangCheck check_hangs(const std::vector<WatchedWorker>& running, std::int64_t timeout_ns, std::int64_t now_ns,
                      std::int64_t initial_timeout_ns) {
  HangCheck out;
  auto consider = [&](std::int64_t at) {
    out.next_check_ns = out.next_check_ns ? std::min(*out.next_check_ns, at) : at;
  };
  for (const WatchedWorker& w : running) {
    if (!w.beat.ever()) {
      const std::int64_t first_beat_within = w.promised ? timeout_ns : initial_timeout_ns;
      if (first_beat_within > 0) {
        const std::int64_t deadline = w.started_ns + first_beat_within;
        if (deadline <= now_ns) {
          out.hung.push_back(w.local_rank);
          continue;
        }
        consider(deadline);
      }
      consider(now_ns + discovery_period_ns(timeout_ns));
      continue;
    }
    const std::int64_t last = std::min(w.beat.time_ns, now_ns);
    const std::int64_t by_beat = last + timeout_ns;
    const std::int64_t deadline = std::max({by_beat, w.beat.quiet_until_ns, w.exempt_until_ns});
    if (deadline <= now_ns) {
      out.hung.push_back(w.local_rank);
      continue;
    }
    consider(deadline);
    // A quiet phase (or an exemption) that outlasts the beat's deadline may end early: its end beats, and the
    // deadline is then that beat's. Look again within the discovery period, not only at the phase's bound
    // (a 10-minute bound once kept the timer asleep while a rank stopped right after the phase).
    if (deadline > by_beat) consider(std::min(deadline, now_ns + discovery_period_ns(timeout_ns)));
  }
  return out;
}

namespace {

// The innermost frame of each thread in faulthandler's text: the first "  File" line after a thread's header.
std::vector<std::string> innermost_frames(const std::string& text) {
  std::vector<std::string> out;
  bool want = true;  // before the first header, a frame line is a thread's too (a single-thread dump has none)
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(at, eol - at);
    if (line.find("(most recent call first)") != std::string::npos) want = true;
    else if (want && line.rfind("  File \"", 0) == 0) {
      out.push_back(line);
      want = false;
    }
    at = eol + 1;
  }
  return out;
}

}  // namespace

std::string torch_collective_in(const std::string& python_stacks) {
  // faulthandler's frame lines: '  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py",
  // line 1536 in all_reduce'. The first such line is the innermost call of its thread.
  static const std::string kFile = "distributed_c10d.py\", line ";
  for (std::size_t at = python_stacks.find(kFile); at != std::string::npos; at = python_stacks.find(kFile, at + 1)) {
    const std::size_t in = python_stacks.find(" in ", at);
    const std::size_t eol = python_stacks.find('\n', at);
    if (in == std::string::npos || (eol != std::string::npos && in > eol)) continue;
    std::string name = python_stacks.substr(in + 4, (eol == std::string::npos ? python_stacks.size() : eol) - in - 4);
    while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
    if (!name.empty() && name.size() <= 64 && name.find_first_of(" \t\"") == std::string::npos) return name;
  }
  // DDP's gradient all-reduce has no distributed_c10d frame: the reducer's hooks run inside the autograd
  // engine, and a rank that waits for its buckets sits in the engine's C++ call, under torch.autograd's
  // backward (torch 2.x: graph.py's _engine_run_backward). A thread whose innermost Python frame is there
  // waits in the backward's collectives (or computes a backward longer than the hang timeout).
  for (const std::string& frame : innermost_frames(python_stacks)) {
    const bool autograd = frame.find("/torch/autograd/__init__.py\", line ") != std::string::npos ||
                          frame.find("/torch/autograd/graph.py\", line ") != std::string::npos;
    if (autograd && (frame.size() >= 9 && (frame.compare(frame.size() - 9, 9, " backward") == 0 ||
                                           frame.find(" in _engine_run_backward") != std::string::npos)))
      return "backward";
  }
  return {};
}

std::string native_collective_in(const std::string& native_stacks) {
  // Frames that only a thread waiting for the other ranks shows (eu-stack and gdb print demangled names).
  // Not gloo's device loop (gloo::transport::tcp::Loop::run), ProcessGroupGloo's idle worker threads
  // (runLoop in a condition wait) or the SDK's idle GlooRing thread (GlooRing::run): every process has those.
  static const std::pair<const char*, const char*> kWaits[] = {
      {"c10d::Reducer::", "backward"},  // finalize_backward and the bucket waits
      {"gloo::transport::tcp::UnboundBuffer::waitRecv", "gloo"},
      {"gloo::transport::tcp::UnboundBuffer::waitSend", "gloo"},
      {"gloo::transport::tcp::Buffer::waitRecv", "gloo"},
      {"gloo::transport::tcp::Buffer::waitSend", "gloo"},
      {"c10d::ProcessGroupGloo::AsyncWork::execute", "gloo"},
      {"c10d::ProcessGroupGloo::AsyncWork::wait", "gloo"},
      {"c10d::ProcessGroupNCCL::WorkNCCL::synchronize", "nccl"},
      {"c10d::ProcessGroupNCCL::WorkNCCL::wait", "nccl"},
      {"c10d::Work::wait", "gloo"},
      {"ddprun::sdk::GlooRing::wait_all", "gloo"},
  };
  for (const auto& [frame, kind] : kWaits)
    if (native_stacks.find(frame) != std::string::npos) return kind;
  return {};
}

}  // namespace ddprun::agent
