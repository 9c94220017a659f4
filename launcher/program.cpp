#include "launcher/program.hpp"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#ifndef DDPRUN_PYTHON_HELPER_DIR  // set by launcher/CMakeLists.txt from the install directories
#define DDPRUN_PYTHON_HELPER_DIR "../share/ddprun/python"
#endif

#include "agent/env_contract.hpp"
#include "common/contract/worker_contract.hpp"
#include "common/error.hpp"
#include "common/process/spawn.hpp"
#include "launcher/exit_codes.hpp"

namespace ddprun::launcher {
using process::regular_file;

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What the kernel runs itself: an executable file that is an ELF binary or starts with "#!". One that cannot be
// read but may be executed is taken for a program too (exec needs no read permission for a binary).
bool executable_program(const std::string& path) {
  if (::access(path.c_str(), X_OK) != 0) return false;
  std::ifstream file(path, std::ios::binary);
  if (!file) return true;
  char magic[4] = {};
  file.read(magic, sizeof magic);
  const std::string start(magic, static_cast<std::size_t>(file.gcount()));
  return start.compare(0, 2, "#!") == 0 || start == "\x7f" "ELF";
}

// The Python a '#!' script names: "python3" for "#!/usr/bin/env python3", "/opt/venv/bin/python" for that path;
// "" when the file has no '#!' line or it names another interpreter (sh, bash, perl).
std::string python_shebang(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::string line;
  if (!file || !std::getline(file, line) || line.compare(0, 2, "#!") != 0) return {};
  std::istringstream words(line.substr(2));
  std::string interpreter;
  words >> interpreter;
  if (interpreter.size() >= 4 && interpreter.compare(interpreter.size() - 4, 4, "/env") == 0) {
    std::string next;
    while (words >> next && !next.empty() && next[0] == '-') {}  // env's own options (-S)
    interpreter = next;
  }
  const std::size_t slash = interpreter.rfind('/');
  const std::string base = interpreter.substr(slash == std::string::npos ? 0 : slash + 1);
  return base.compare(0, 6, "python") == 0 ? interpreter : std::string();
}

std::string checked_executable(const std::string& name, const std::string& what, const std::vector<std::string>& env) {
  const process::ResolvedProgram r = process::resolve_program(name, process::path_of(env));
  switch (r.check) {
    case process::ProgramCheck::kOk: return r.path;
    case process::ProgramCheck::kNotFound:
      if (name.find('/') != std::string::npos) throw UsageError(what + " '" + name + "' not found", kExitNotFound);
      // A program of that name in the working directory: PATH is searched, as a shell does, not the directory.
      throw UsageError(what + " '" + name + "' not found in PATH" +
                           (regular_file(name) ? "; to run the one in the working directory, give ./" + name : ""),
                       kExitNotFound);
    case process::ProgramCheck::kIsDirectory:
      throw UsageError(what + " '" + r.path + "' is a directory, not a program", kExitNotExecutable);
    case process::ProgramCheck::kNotExecutable:
      throw UsageError(what + " '" + r.path + "' is not executable (chmod +x it, or run it through its interpreter)",
                       kExitNotExecutable);
  }
  return r.path;
}

// The interpreter's real file, for the log and the summary: "/usr/bin/python3" is a link to
// "/usr/bin/python3.11"; a pyenv or venv shim is a file of its own and shows as such.
std::string describe_interpreter(const std::string& path) {
  char real[PATH_MAX];
  if (::realpath(path.c_str(), real) == nullptr || path == real) return path;
  return path + " (" + real + ")";
}
}  // namespace

void resolve_worker_command(const std::vector<std::string>& command, bool module, bool no_python, bool run_path,
                            const std::vector<std::string>& env, agent::AgentConfig& cfg,
                            std::vector<std::string>& notes) {
  const std::string& first = command.front();
  if (module && run_path) throw UsageError("-m/--module and --run-path contradict each other", kExitUsage);
  if (module && no_python) throw UsageError("-m/--module and --no-python contradict each other", kExitUsage);
  // torchrun gives PROGRAM to Python whatever it is, unless --no-python. ddprun executes what is plainly a
  // program: a name that is no file here (found in PATH: `ddprun hostname`), or an executable ELF binary or
  // '#!' script. Every other file, a script without .py included (`ddprun train`, `ddprun ./train` not made
  // executable, or executable without a '#!' line), is Python's, as in torchrun.
  // An executable '#!' script whose interpreter is Python is Python's too (issue 34): named without ./ it was
  // refused ("not found in PATH") where torchrun runs it, and PYTHON_EXEC was silently ignored for it. It runs
  // with PYTHON_EXEC when set, else with the interpreter its '#!' line names.
  // A '#!' Python script found through PATH (`ddprun train-tool`, no file of that name here) is Python's as well,
  // so that PYTHON_EXEC is honoured for it too (issue 54: it was executed, its '#!' line choosing the Python).
  std::string script = first;
  if (!module && !run_path && !no_python && !ends_with(first, ".py") && first.find('/') == std::string::npos &&
      !regular_file(first)) {
    const process::ResolvedProgram found = process::resolve_program(first, process::path_of(env));
    if (found.check == process::ProgramCheck::kOk && !python_shebang(found.path).empty()) script = found.path;
  }
  const std::string shebang = !module && !ends_with(script, ".py") && regular_file(script) ? python_shebang(script) : "";
  const bool script_file = ends_with(first, ".py") || (regular_file(first) && !executable_program(first)) ||
                           !shebang.empty();
  const bool python = module || run_path || (!no_python && script_file);
  if (python && !module && !run_path && !ends_with(first, ".py") && shebang.empty())
    notes.push_back("debug: '" + first + "' is neither an executable ELF binary nor an executable '#!' script: " +
                    "running it with Python, as torchrun does (--no-python executes it)");
  // torch.distributed.launch put --local_rank=N right after the program or script, before its arguments.
  const std::size_t program_args = command.size() - 1;
  if (!python) {
    cfg.program = checked_executable(first, "program", env);
    cfg.argv = command;
    cfg.local_rank_arg_at = cfg.argv.size() - program_args;
    return;
  }
  // torchrun runs sys.executable, the Python that runs torchrun (and so has torch); ddprun has no such
  // Python of its own and runs python3 from PATH, which may be a shim without torch: say which one.
  const std::string exec = contract::env_value(env, "PYTHON_EXEC", "");
  // A '#!' line naming a Python this machine lacks (`#!/usr/bin/env python` on Debian without
  // python-is-python3) is not the user's choice of interpreter, only the script's habit: python3 runs it, as
  // torchrun's own Python would (issue 54: exit 127 where torchrun ran it). Said, since it may not be the same.
  std::string from_shebang = shebang;
  if (exec.empty() && !shebang.empty() &&
      process::resolve_program(shebang, process::path_of(env)).check == process::ProgramCheck::kNotFound) {
    notes.push_back("warning: '" + first + "' names '" + shebang + "' on its '#!' line, which is not found" +
                    (shebang.find('/') == std::string::npos ? " in PATH" : "") +
                    "; running it with python3 from PATH (set PYTHON_EXEC to choose the Python)");
    from_shebang.clear();
  }
  const std::string interpreter = !exec.empty() ? exec : !from_shebang.empty() ? from_shebang : "python3";
  const char* what = exec.empty() && !from_shebang.empty() ? "Python interpreter (the script's '#!' line)"
                                                           : "Python interpreter (PYTHON_EXEC)";
  cfg.program = checked_executable(interpreter, what, env);
  cfg.python = describe_interpreter(cfg.program);
  cfg.python_origin = !exec.empty()         ? "PYTHON_EXEC"
                      : !from_shebang.empty() ? "the script's '#!' line; PYTHON_EXEC unset"
                      : !shebang.empty()      ? "python3 from PATH: the script's '#!' interpreter is missing"
                                              : "python3 from PATH; PYTHON_EXEC unset";
  cfg.argv = {interpreter, "-u"};
  if (module) {
    cfg.argv.push_back("-m");
  } else {
    struct stat st {};
    if (::stat(script.c_str(), &st) != 0) throw UsageError("script '" + first + "' not found", kExitNotFound);
    if (S_ISDIR(st.st_mode)) throw UsageError("script '" + first + "' is a directory", kExitNotExecutable);
  }
  cfg.argv.push_back(module ? first : script);
  cfg.argv.insert(cfg.argv.end(), command.begin() + 1, command.end());
  cfg.local_rank_arg_at = cfg.argv.size() - program_args;
}

std::string python_helper_dir(const std::string& executable) {
  const std::size_t slash = executable.rfind('/');
  if (slash == std::string::npos) return {};
  const std::string dir = executable.substr(0, slash + 1) + DDPRUN_PYTHON_HELPER_DIR;
  if (!regular_file(dir + "/ddprun_heartbeat.py")) return {};
  char real[PATH_MAX];
  return ::realpath(dir.c_str(), real) != nullptr ? std::string(real) : dir;
}

std::vector<std::string> with_python_path(std::vector<std::string> env, const std::string& dir) {
  if (dir.empty()) return env;
  static const std::string kName = "PYTHONPATH=";
  for (std::string& e : env) {
    if (e.rfind(kName, 0) != 0) continue;  // the first definition is the one a worker sees
    const std::string path = e.substr(kName.size());
    if (path.empty()) {
      e = kName + dir;
    } else if ((":" + path + ":").find(":" + dir + ":") == std::string::npos) {
      e += ":" + dir;
    }
    return env;
  }
  env.push_back(kName + dir);
  return env;
}

}  // namespace ddprun::launcher
