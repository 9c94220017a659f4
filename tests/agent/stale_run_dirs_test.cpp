// Which run directories a new run sweeps (agent/stale_run_dirs.hpp): only this user's, of this boot, whose
// maker is gone.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "agent/stale_run_dirs.hpp"
#include <doctest/doctest.h>
#include "tests/agent/temp_dir.hpp"

using namespace ddprun::agent;
namespace fs = std::filesystem;

namespace {

std::string make_dir(const TempDir& base, const std::string& name, const std::string& owner) {
  const std::string dir = base.path + "/" + name;
  fs::create_directories(dir + "/attempt_0/0");
  if (!owner.empty()) std::ofstream(dir + "/" + kOwnerFileName) << owner;
  return dir;
}

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// A pid that no longer runs: a child that exited and was reaped.
pid_t gone_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST_CASE("a run directory whose ddprun is gone is swept; a live one, another boot's, an unmarked one stay") {
  TempDir base;
  const std::string live = make_dir(base, "ddprun-live_ABCDEF", "");
  mark_run_dir_owner(live);
  const std::string mine = first_line(live + "/" + kOwnerFileName);
  const std::string boot = mine.substr(0, mine.find(' '));
  const std::string start = mine.substr(mine.rfind(' ') + 1);
  REQUIRE(!boot.empty());

  const std::string dead = make_dir(base, "ddprun-dead_ABCDEF", boot + " " + std::to_string(gone_pid()) + " 1\n");
  // Our own pid, but started at another time: the pid was reused by an unrelated process.
  const std::string reused =
      make_dir(base, "ddprun-reused_ABCDEF", boot + " " + std::to_string(::getpid()) + " " + start + "0\n");
  const std::string other_boot = make_dir(base, "ddprun-boot_ABCDEF", "another-boot 1 1\n");
  const std::string unmarked = make_dir(base, "ddprun-none_ABCDEF", "");
  const std::string not_ours = make_dir(base, "mydata_ABCDEF", boot + " " + std::to_string(gone_pid()) + " 1\n");

  CHECK(sweep_stale_run_dirs(base.path) == 2);
  CHECK_FALSE(fs::exists(dead));
  CHECK_FALSE(fs::exists(reused));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other_boot));
  CHECK(fs::exists(unmarked));
  CHECK(fs::exists(not_ours));
  CHECK(sweep_stale_run_dirs(base.path + "/no-such-dir") == 0);
}
