#include "common/process/wait_status.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>

namespace ddprun::process {
namespace {
struct NamedSignal {
  int number;
  const char* name;
};
constexpr NamedSignal kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},     {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},   {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},   {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},   {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
    {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},   {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
    {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},   {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},     {SIGSYS, "SIGSYS"},
};
}  // namespace

ExitStatus decode_wait_status(int status) {
  ExitStatus s;
  if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.signal = WTERMSIG(status);
    s.core_dumped = WCOREDUMP(status);
  } else if (WIFEXITED(status)) {
    s.code = WEXITSTATUS(status);
  }
  return s;
}

std::string signal_name(int signal) {
  for (const auto& s : kSignals)
    if (s.number == signal) return s.name;
  return "SIG" + std::to_string(signal);
}

int parse_signal(const std::string& text) {
  if (text.empty()) return 0;
  if (std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
    int n = std::atoi(text.c_str());
    return (n > 0 && n < NSIG) ? n : 0;
  }
  std::string upper;
  for (char c : text) upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  if (upper.rfind("SIG", 0) != 0) upper = "SIG" + upper;
  for (const auto& s : kSignals)
    if (upper == s.name) return s.number;
  return 0;
}

std::string ExitStatus::describe() const {
  if (!signaled) return "exit code " + std::to_string(code);
  std::string d = "signal " + std::to_string(signal) + " (" + signal_name(signal) + ")";
  if (core_dumped) d += ", core dumped";
  return d;
}

}  // namespace ddprun::process
