#include "agent/stack_capture.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "agent/signal_reader.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/process/process_tree.hpp"
#include "common/process/spawn.hpp"
#include "common/process/wait_status.hpp"

namespace ddprun::agent {
namespace {
// A new file only ours: never follows a planted link, never opens (or waits on) a planted FIFO, never
// truncates something that was there. The caller removed any leftover of its own first.
int open_private(const std::string& path) {
  ::unlink(path.c_str());
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
}

// After the native tools, how long Python gets to write its stacks (faulthandler writes from its signal
// handler within milliseconds of running again; a process stuck in the kernel may never run it).
constexpr std::chrono::milliseconds kPythonWait{1000};
constexpr std::chrono::milliseconds kPythonPoll{20};

long long file_size(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_size) : -1;
}

char process_state(pid_t pid) {
  process::ProcStat st;
  const std::string dir = std::to_string(pid);
  return process::read_proc_stat(dir.c_str(), st) ? st.state : 0;
}
}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<std::vector<std::string>> stack_tool_command(pid_t pid, const std::string& path_env) {
  const std::string p = std::to_string(pid);
  if (process::resolve_program("eu-stack", path_env).check == process::ProgramCheck::kOk)
    return std::vector<std::string>{"eu-stack", "-p", p};
  if (process::resolve_program("gdb", path_env).check == process::ProgramCheck::kOk)
    return std::vector<std::string>{"gdb", "-batch", "-nx", "-p", p, "-ex", "thread apply all bt"};
  return std::nullopt;
}

bool catches_signal(pid_t pid, int signal) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
    return signal >= 1 && signal <= 64 && ((mask >> (signal - 1)) & 1ULL) != 0;
  }
  return false;
}

int python_stacks_signal() { return SIGRTMIN + 2; }

void StackCapture::start(std::vector<CaptureTarget> targets, std::string out_path, std::string path_env,
                         std::chrono::milliseconds limit, std::chrono::milliseconds dump_limit, Done done) {
  targets_ = std::move(targets);
  out_path_ = std::move(out_path);
  done_ = std::move(done);
  active_ = true;
  python_phase_ = false;
  started_ = std::chrono::steady_clock::now();
  native_.clear();
  tools_.assign(targets_.size(), Tool{});
  notes_.assign(targets_.size(), std::string());
  python_asked_.assign(targets_.size(), false);
  python_sizes_.assign(targets_.size(), -1);
  nccl_wait_.assign(targets_.size(), DumpWait::kNone);
  nccl_notes_.assign(targets_.size(), std::string());
  nccl_before_.assign(targets_.size(), FileMark{});
  nccl_last_.assign(targets_.size(), FileMark{});
  nccl_written_.assign(targets_.size(), false);
  tool_name_.clear();
  deadline_.expires_after(limit);
  deadline_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !active_) return;
    kill_tools();
    for (std::size_t i = 0; i < tools_.size(); ++i)
      if (tools_[i].running) notes_[i] += "(the stack tool did not finish in time: cut short)\n";
    // A dump still being written keeps the capture open until its own deadline; Python's stacks are asked
    // for once the killed tools are reaped, and the poll ends the capture when the dumps are whole.
    if (!nccl_dumps_settled(/*take_look=*/false)) return;
    finish();
  });
  ask_nccl_dumps();
  if (std::any_of(nccl_wait_.begin(), nccl_wait_.end(), [](DumpWait w) { return w == DumpWait::kWaiting; })) {
    dump_deadline_.expires_after(std::max(limit, dump_limit));
    dump_deadline_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || !active_) return;
      kill_tools();
      finish();
    });
  }
  // Every target at once: a collective that never completes usually leaves several ranks hung together.
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const auto command = stack_tool_command(targets_[i].pid, path_env);
    if (!command) {
      notes_[i] += "(no native stacks: neither eu-stack (elfutils) nor gdb is installed)\n";
      continue;
    }
    tool_name_ = command->front();
    const int out = open_private(part_path(i));
    if (out < 0) {
      notes_[i] += "(no native stacks: cannot create " + part_path(i) + ")\n";
      continue;
    }
    process::SpawnOptions opts;
    opts.program = command->front();
    opts.argv = *command;
    opts.env = {"PATH=" + path_env, "LC_ALL=C"};
    opts.stdout_fd = out;
    opts.stderr_fd = out;
    try {
      tools_[i].pid = process::spawn(opts);
      tools_[i].running = true;
    } catch (const std::exception& e) {
      notes_[i] += std::string("(no native stacks: ") + e.what() + ")\n";
    }
    ::close(out);
  }
  bool any = false;
  for (const Tool& t : tools_) any = any || t.running;
  if (!any) ask_python();
}

bool StackCapture::on_child_exit(pid_t pid) {
  bool ours = false;
  bool any_running = false;
  for (Tool& t : tools_) {
    if (t.pid == pid && t.running) {
      t.running = false;
      ours = true;
    }
    any_running = any_running || t.running;
  }
  if (ours && active_ && !python_phase_ && !any_running) ask_python();
  return ours;
}

// First, before the stack tools attach: a tool's ptrace stops the process, torch's thread that reads the FIFO
// with it; asked first, the recorder can dump while the native stacks are taken.
void StackCapture::ask_nccl_dumps() {
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const CaptureTarget& t = targets_[i];
    if (t.nccl_pipe.empty()) continue;
    const uid_t owner = process_uid(t.pid);
    if (owner == static_cast<uid_t>(-1)) continue;  // gone: nothing to ask
    if (t.wait_for_nccl_dump) nccl_before_[i] = nccl_last_[i] = file_mark(t.nccl_dump);
    const DumpAskResult asked = ask_for_dump(t.nccl_pipe, owner);
    switch (asked.outcome) {
      case DumpAsk::kSent:
        nccl_wait_[i] = DumpWait::kWaiting;
        if (process_state(t.pid) == 'T') {
          nccl_wait_[i] = DumpWait::kAskedOnly;
          nccl_notes_[i] = "(stopped process: it cannot write its dump)\n";
        } else if (!t.wait_for_nccl_dump) {
          // The user's own TORCH_NCCL_DEBUG_INFO_TEMP_FILE: perhaps a file system that can hang the loop's stat.
          nccl_wait_[i] = DumpWait::kAskedOnly;
          nccl_notes_[i] = "(outside ddprun's directory: not waited for)\n";
        }
        break;
      case DumpAsk::kNoPipe:
      case DumpAsk::kNoReader:
        break;  // nothing listens (no NCCL, no recorder, or the FIFO of a process gone): no cost, nothing to say
      case DumpAsk::kRefused:
      case DumpAsk::kFailed:
        nccl_notes_[i] = "(not asked: " + t.nccl_pipe + " " + asked.detail + ")\n";
        break;
    }
  }
}

void StackCapture::ask_python() {
  python_phase_ = true;
  const int sig = python_stacks_signal();
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const CaptureTarget& t = targets_[i];
    // Only a worker that opened its stacks file and has a handler for the signal asked for this; any
    // other would die of it (the default action) or take it for something else.
    if (t.python_file.empty() || file_size(t.python_file) < 0 || !catches_signal(t.pid, sig)) continue;
    if (process_state(t.pid) == 'T') {
      notes_[i] += "(stopped process: it cannot run its Python stack handler)\n";
      continue;
    }
    python_sizes_[i] = file_size(t.python_file);
    if (::kill(t.pid, sig) == 0) python_asked_[i] = true;
  }
  python_until_ = std::chrono::steady_clock::now() + kPythonWait;
  poll_outputs();
}

void StackCapture::poll_outputs() {
  // Python: done when every asked file grew and then stopped growing for one poll, or when its wait is over.
  bool python_settled = true;
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    if (!python_asked_[i]) continue;
    const long long now = file_size(targets_[i].python_file);
    if (now <= 0 || now != python_sizes_[i]) python_settled = false;
    python_sizes_[i] = now;
  }
  // The dumps: until each is whole. Torch reads its FIFO once a second and then pickles its ring buffer, so
  // they get their own deadline (dump_limit), not Python's second.
  const bool dumps_settled = nccl_dumps_settled(/*take_look=*/true);
  if (dumps_settled && (python_settled || std::chrono::steady_clock::now() >= python_until_)) return finish();
  poll_.expires_after(kPythonPoll);
  poll_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && active_) poll_outputs();
  });
}

bool StackCapture::nccl_dumps_settled(bool take_look) {
  bool all = true;
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    if (nccl_wait_[i] != DumpWait::kWaiting) continue;
    const FileMark now = file_mark(targets_[i].nccl_dump);
    if (!dump_settled(nccl_before_[i], nccl_last_[i], now)) all = false;
    if (take_look) nccl_last_[i] = now;
  }
  return all;
}

std::string StackCapture::nccl_dump_note(std::size_t i) const {
  const CaptureTarget& t = targets_[i];
  if (nccl_wait_[i] == DumpWait::kNone && nccl_notes_[i].empty()) return "";
  std::string text = "\n## rank " + std::to_string(t.rank) + ": NCCL Flight Recorder\n";
  if (nccl_wait_[i] == DumpWait::kNone) return text + nccl_notes_[i];
  if (nccl_wait_[i] == DumpWait::kAskedOnly)
    return text + "asked through " + t.nccl_pipe + "; torch writes its dump to " + t.nccl_dump + " " + nccl_notes_[i];
  if (!nccl_written_[i]) return text + "asked through " + t.nccl_pipe + "; no dump written in time\n";
  const FileMark m = file_mark(t.nccl_dump);
  return text + "dump in " + t.nccl_dump_shown + " (" + std::to_string(m.size) + " bytes" +
         (m == nccl_last_[i] ? "" : ", still growing at the capture's end") + ")\n";
}

std::vector<NcclDump> StackCapture::nccl_dumps() const {
  std::vector<NcclDump> dumps;
  for (std::size_t i = 0; i < targets_.size(); ++i)
    if (nccl_wait_[i] != DumpWait::kNone)
      dumps.push_back({targets_[i].rank, targets_[i].nccl_dump, targets_[i].nccl_dump_shown, nccl_written_[i]});
  return dumps;
}

void StackCapture::kill_tools() {
  for (const Tool& t : tools_)
    if (t.running) process::signal_group(t.pid, SIGKILL);  // reaped later, still recognised as ours
}

void StackCapture::finish() {
  if (!active_) return;
  active_ = false;
  deadline_.cancel();
  dump_deadline_.cancel();
  poll_.cancel();
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const FileMark now = nccl_wait_[i] == DumpWait::kWaiting ? file_mark(targets_[i].nccl_dump) : FileMark{};
    nccl_written_[i] = now.size > 0 && now != nccl_before_[i];
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
  std::ostringstream text;
  const auto children = std::count_if(targets_.begin(), targets_.end(), [](const CaptureTarget& t) { return t.child_of; });
  text << "# ddprun: stacks of " << targets_.size() - static_cast<std::size_t>(children) << " worker(s)"
       << (children ? " and " + std::to_string(children) + " child process(es) of workers" : std::string())
       << ", captured in " << ms.count() << " ms" << (tool_name_.empty() ? "" : " with " + tool_name_) << "\n";
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const CaptureTarget& t = targets_[i];
    if (t.child_of)
      text << "\n## rank " << t.rank << ": child process " << t.pid << " of pid " << t.child_of << " ("
           << (process_name(t.pid).empty() ? "gone" : process_name(t.pid)) << "): native stacks\n";
    else
      text << "\n## rank " << t.rank << " (local rank " << t.local_rank << ", pid " << t.pid << "): native stacks\n";
    if (tools_[i].pid > 0) {
      std::string native = read_file(part_path(i));
      text << native;
      if (!t.child_of) native_[t.pid] = std::move(native);
    }
    text << notes_[i];
    if (python_asked_[i]) {
      const std::string py = read_file(t.python_file);
      text << "\n## rank " << t.rank << ": Python stacks (faulthandler)\n"
           << (py.empty() ? "(none written in time)\n" : py);
    }
    text << nccl_dump_note(i);
    ::unlink(part_path(i).c_str());
  }
  // Written whole, then renamed: a reader never sees half a file.
  const std::string tmp = out_path_ + ".tmp";
  const int fd = open_private(tmp);
  if (fd >= 0) {
    const bool ok = write_all(fd, text.str());
    ::close(fd);
    if (ok) ::rename(tmp.c_str(), out_path_.c_str());
    else ::unlink(tmp.c_str());
  }
  if (done_) done_();
}

std::string StackCapture::native_stacks(pid_t pid) const {
  const auto it = native_.find(pid);
  return it == native_.end() ? std::string() : it->second;
}

void StackCapture::abandon() {
  if (!active_) return;
  active_ = false;
  deadline_.cancel();
  dump_deadline_.cancel();
  poll_.cancel();
  kill_tools();
  for (std::size_t i = 0; i < tools_.size(); ++i) ::unlink(part_path(i).c_str());
}

}  // namespace ddprun::agent
