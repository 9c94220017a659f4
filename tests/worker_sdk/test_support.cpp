#include "tests/worker_sdk/test_support.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/process/spawn.hpp"
#include "common/process/wait_status.hpp"
#include "worker_sdk/spawn.hpp"

extern char** environ;

namespace ddprun::sdk::test {
namespace {

std::map<std::string, Role>& roles() {
  static std::map<std::string, Role> r;
  return r;
}

// Sets variables for a scope and restores the previous values after.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& env) {
    for (const auto& [k, v] : env) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::make_optional(std::string(old)) : std::nullopt);
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1); else ::unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TempDir::TempDir() {
  char tmpl[] = "/tmp/ddprun-sdk-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

// Removed with nftw, not std::filesystem::remove_all: PyTorch 2.11's pip libtorch.so exports its own copy of
// remove_all, which the dynamic linker binds ahead of libstdc++'s, and that copy jumps to address 0 once the
// directory holds files (seen on the GPU machine, scripts/ci_nccl_gpu.sh). libc's walk has no such twin.
TempDir::~TempDir() {
  auto remove_one = [](const char* path, const struct stat*, int, struct FTW*) {
    ::remove(path);  // best effort: go on past what cannot be removed
    return 0;
  };
  ::nftw(path_.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

bool register_role(const std::string& name, Role role) {
  roles()[name] = std::move(role);
  return true;
}

int run_role_from_argv(int argc, char** argv) {
  if (argc < 4 || std::string(argv[1]) != "--role") return -1;
  auto it = roles().find(argv[2]);
  if (it == roles().end()) return 99;
  return it->second(argv[3]);
}

int run_ranks(const std::string& name, int nproc, const std::string& dir,
              const std::map<std::string, std::string>& env, int term_timeout_ms) {
  ScopedEnv scoped(env);
  SpawnOptions options;
  options.nproc = nproc;
  options.term_timeout = std::chrono::milliseconds(term_timeout_ms);
  return spawn_workers({"sdk_test", "--role", name, dir}, options);
}

int run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                std::string& output) {
  char tmpl[] = "/tmp/ddprun-sdk-out-XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  process::SpawnOptions o;
  o.program = argv.at(0);
  o.argv = argv;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    if (env.count(entry.substr(0, entry.find('='))) == 0) o.env.push_back(entry);
  }
  for (const auto& [k, v] : env) o.env.push_back(k + "=" + v);
  o.stdout_fd = fd;
  o.stderr_fd = fd;
  pid_t pid = process::spawn(o);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(fd);
  output = read_text(tmpl);
  ::unlink(tmpl);
  return process::decode_wait_status(status).shell_code();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool process_alive(int pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace ddprun::sdk::test
