#include "launcher/program.hpp"

#include <sys/stat.h>

#include "agent/env_contract.hpp"
#include "common/error.hpp"
#include "common/process/spawn.hpp"
#include "launcher/exit_codes.hpp"

namespace ddprun::launcher {
namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string checked_executable(const std::string& name, const std::string& what, const std::vector<std::string>& env) {
  const process::ResolvedProgram r = process::resolve_program(name, process::path_of(env));
  switch (r.check) {
    case process::ProgramCheck::kOk: return r.path;
    case process::ProgramCheck::kNotFound:
      throw UsageError(what + " '" + name + "' not found" +
                           (name.find('/') == std::string::npos ? " in PATH" : ""),
                       kExitNotFound);
    case process::ProgramCheck::kIsDirectory:
      throw UsageError(what + " '" + r.path + "' is a directory, not a program", kExitNotExecutable);
    case process::ProgramCheck::kNotExecutable:
      throw UsageError(what + " '" + r.path + "' is not executable (chmod +x it, or run it through its interpreter)",
                       kExitNotExecutable);
  }
  return r.path;
}
}  // namespace

void resolve_worker_command(const std::vector<std::string>& command, bool module, bool no_python, bool run_path,
                            const std::vector<std::string>& env, agent::AgentConfig& cfg) {
  const std::string& first = command.front();
  if (module && run_path) throw UsageError("-m/--module and --run-path contradict each other", kExitUsage);
  if (module && no_python) throw UsageError("-m/--module and --no-python contradict each other", kExitUsage);
  const bool python = module || run_path || (!no_python && ends_with(first, ".py"));
  if (!python) {
    cfg.program = checked_executable(first, "program", env);
    cfg.argv = command;
    return;
  }
  const std::string interpreter = agent::env_value(env, "PYTHON_EXEC", "python3");
  cfg.program = checked_executable(interpreter, "Python interpreter (PYTHON_EXEC)", env);
  cfg.argv = {interpreter, "-u"};
  if (module) {
    cfg.argv.push_back("-m");
  } else {
    struct stat st {};
    if (::stat(first.c_str(), &st) != 0) throw UsageError("script '" + first + "' not found", kExitNotFound);
    if (S_ISDIR(st.st_mode)) throw UsageError("script '" + first + "' is a directory", kExitNotExecutable);
  }
  cfg.argv.insert(cfg.argv.end(), command.begin(), command.end());
}

}  // namespace ddprun::launcher
