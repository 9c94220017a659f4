// The file in which ddprun-rendezvous keeps the round it runs for its own restart (rendezvous/remembered_round.hpp):
// written whole and read back the same; another run's, a foreign or a broken file is no round; a file that cannot
// be written leaves no older round behind.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "rendezvous/auth.hpp"
#include "rendezvous/remembered_round.hpp"
#include "tests/agent/temp_dir.hpp"

using namespace ddprun::rendezvous;

namespace {
RememberedRound sample() {
  RememberedRound r;
  r.round.restart_count = 2;
  r.round.nnodes = 3;
  r.round.world_size = 12;
  r.round.master_addr = "fd00::1";
  r.round.master_port = 29500;
  r.round.fingerprint = nprocs_fingerprint({4, 4, 4});
  r.seats = {seat_commitment("a"), "", seat_commitment("c")};
  r.hosts = {"n1", "", "n3"};
  return r;
}
}  // namespace

TEST_CASE("a remembered round is read back as written, from a private file named by run id and port") {
  TempDir dir;
  const std::string path = remembered_round_path(dir.path, "job7", 29400);
  CHECK(path.rfind(dir.path + "/rdzv-", 0) == 0);
  CHECK(path.find("-29400.round") != std::string::npos);
  CHECK(path != remembered_round_path(dir.path, "job8", 29400));
  CHECK(path != remembered_round_path(dir.path, "job7", 29401));
  std::string problem;
  CHECK_FALSE(read_remembered_round(path, "job7", problem));  // none yet: not a problem
  CHECK(problem.empty());
  REQUIRE(write_remembered_round(path, "job7", sample(), problem));
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const auto back = read_remembered_round(path, "job7", problem);
  REQUIRE(back);
  CHECK(problem.empty());
  CHECK(same_round(back->round, sample().round));
  CHECK(back->seats == sample().seats);
  CHECK(back->hosts == sample().hosts);
  CHECK_FALSE(read_remembered_round(path, "job8", problem));  // another run's
  CHECK(problem.find("is of another run id") != std::string::npos);
}

TEST_CASE("a file that is not one of ours is no round, and a failed write leaves none") {
  TempDir dir;
  const std::string path = dir.path + "/r";
  for (const char* text : {"not json", R"({"format":"something else"})",
                           R"({"format":"ddprun-rdzv/1 remembered round","run_id":"j","restart_count":0,"nnodes":2,)"
                           R"("world_size":2,"master_addr":"a","master_port":1,"nprocs":"0","seats":["x","y"]})"}) {
    std::ofstream(path) << text;
    std::string problem;
    CHECK_FALSE(read_remembered_round(path, "j", problem));
    CHECK(problem.find("is not a round a rendezvous server wrote") != std::string::npos);
  }
  std::string problem;
  REQUIRE(write_remembered_round(path, "j", sample(), problem));
  CHECK_FALSE(write_remembered_round(dir.path + "/gone/r", "j", sample(), problem));
  CHECK(problem.find("cannot keep the round in") == 0);
  // A directory where the file should be: the write fails, and the older file is not left as if it were current.
  ::unlink(path.c_str());
  REQUIRE(::mkdir((path + ".new").c_str(), 0700) == 0);
  std::ofstream(path) << "old";
  CHECK_FALSE(write_remembered_round(path, "j", sample(), problem));
  CHECK(::access(path.c_str(), F_OK) != 0);
  ::rmdir((path + ".new").c_str());
}

TEST_CASE("a round as text, as etcd keeps it; one kept before the hosts were is read without them") {
  std::string problem;
  const auto back = decode_remembered_round(encode_remembered_round("job7", sample()), "job7", "etcd", problem);
  REQUIRE(back);
  CHECK(back->hosts == sample().hosts);
  const std::string older = R"({"format":"ddprun-rdzv/1 remembered round","run_id":"j","restart_count":0,"nnodes":1,)"
                            R"("world_size":1,"master_addr":"a","master_port":1,"nprocs":"0","seats":[""]})";
  const auto old = decode_remembered_round(older, "j", "etcd", problem);
  REQUIRE(old);
  CHECK(old->hosts.empty());
  CHECK_FALSE(decode_remembered_round(older, "k", "the round kept in etcd", problem));
  CHECK(problem == "the round kept in etcd is of another run id");
}
