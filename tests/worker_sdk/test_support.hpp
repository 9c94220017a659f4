// Helpers of the worker SDK tests: temporary directories, and running this test binary again as the
// ranks of a job ("sdk_test --role NAME DIR"), through the SDK's own embedded spawn.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddprun::sdk::test {

// False in an SDK built without Gloo's headers (NCCL only): the tests whose ranks reduce CPU tensors are
// skipped there (`* doctest::skip(!kCpuCollectives)`), the CUDA ones run.
#ifdef DDPRUN_SDK_GLOO
inline constexpr bool kCpuCollectives = true;
#else
inline constexpr bool kCpuCollectives = false;
#endif

// A fresh directory under /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A worker role: runs inside each spawned rank with the directory the test shares with it.
using Role = std::function<int(const std::string& dir)>;
// Registers `role` under `name` at static-initialisation time (see SDK_TEST_ROLE).
bool register_role(const std::string& name, Role role);
// Runs the role named in argv ("--role NAME DIR") and returns its exit code, or -1 when argv names none.
int run_role_from_argv(int argc, char** argv);

// Starts `nproc` ranks of role `name` with embedded spawn and returns the job's exit code.
// `env` entries are set in this process for the duration (the ranks inherit them).
int run_ranks(const std::string& name, int nproc, const std::string& dir,
              const std::map<std::string, std::string>& env = {}, int term_timeout_ms = 5000);

// Runs a program to completion with stdout+stderr captured; returns the shell exit code.
int run_program(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                std::string& output);

std::string read_text(const std::string& path);
bool process_alive(int pid);

}  // namespace ddprun::sdk::test

#define SDK_TEST_CAT2(a, b) a##b
#define SDK_TEST_CAT(a, b) SDK_TEST_CAT2(a, b)
// SDK_TEST_ROLE(name) { ...body using `dir`...; return 0; }
#define SDK_TEST_ROLE(name)                                                                           \
  static int SDK_TEST_CAT(role_fn_, __LINE__)(const std::string& dir);                                \
  static const bool SDK_TEST_CAT(role_reg_, __LINE__) =                                               \
      ::ddprun::sdk::test::register_role(name, &SDK_TEST_CAT(role_fn_, __LINE__));                    \
  static int SDK_TEST_CAT(role_fn_, __LINE__)([[maybe_unused]] const std::string& dir)
