// A child's end, decoded from waitpid's status: the exit code, or the signal that killed it.
#pragma once

#include <string>

namespace ddprun::process {

struct ExitStatus {
  bool signaled = false;
  int code = 0;    // valid when !signaled
  int signal = 0;  // valid when signaled
  bool core_dumped = false;

  bool success() const { return !signaled && code == 0; }
  // What a shell would report: the exit code, or 128 + the signal number.
  int shell_code() const { return signaled ? 128 + signal : code; }
  // "exit code 3" or "signal 9 (SIGKILL)".
  std::string describe() const;
};

ExitStatus decode_wait_status(int status);

// "SIGKILL" for 9; "SIG42" for numbers without a name (real-time signals).
std::string signal_name(int signal);
// Accepts "9", "KILL", "SIGKILL" (case-insensitive). Returns 0 if unknown.
int parse_signal(const std::string& text);

}  // namespace ddprun::process
