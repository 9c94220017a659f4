// The NCCL Flight Recorder's side of the worker environment and of the hang capture (agent/flight_recorder.hpp):
// which variables a worker gets, where ddprun looks for the FIFO and the dump, and how it asks (a real FIFO).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "agent/env_contract.hpp"
#include "agent/flight_recorder.hpp"
#include "temp_dir.hpp"

using namespace ddprun::agent;

namespace {
const char* const kPrefix = "/run/ddprun-x/attempt_0/1/nccl_trace_rank_";

std::vector<std::string> env_with_heartbeat(const std::vector<std::string>& base, bool flight_recorder = true) {
  World w;
  w.local_world_size = 2;
  w.world_size = 4;
  w.rank_offset = 2;
  WorkerEnvInputs in;
  in.local_rank = 1;
  in.heartbeat_fd = 5;
  in.stacks_file = "/run/ddprun-x/attempt_0/1/python_stacks.txt";
  in.stacks_signal = 36;
  if (flight_recorder) in.flight_recorder_prefix = kPrefix;
  return worker_environment(base, w, in);
}

bool has(const std::vector<std::string>& env, const std::string& name) {
  return env_value(env, name, "\x01") != "\x01";
}
}  // namespace

TEST_CASE("under --hang-timeout the recorder is on, read every second, with its FIFO and dump in ddprun's tree") {
  const auto env = env_with_heartbeat({"PATH=/bin"});
  CHECK(env_value(env, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == kPrefix);
  CHECK(env_value(env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == kPrefix);
  CHECK(env_value(env, "TORCH_NCCL_TRACE_BUFFER_SIZE") == "2000");
  CHECK(env_value(env, "TORCH_NCCL_DUMP_ON_TIMEOUT") == "1");
  CHECK_FALSE(has(env, "TORCH_FR_DUMP_TEMP_FILE"));
  CHECK_FALSE(has(env, "TORCH_FR_BUFFER_SIZE"));
}

TEST_CASE("every Flight Recorder variable the user set is kept, under either of torch's names") {
  const auto env = env_with_heartbeat({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/mine/pipe_", "TORCH_NCCL_TRACE_BUFFER_SIZE=0",
                                       "TORCH_NCCL_DUMP_ON_TIMEOUT=0", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/mine/dump_"});
  CHECK(env_value(env, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == "/mine/pipe_");
  CHECK(env_value(env, "TORCH_NCCL_TRACE_BUFFER_SIZE") == "0");
  CHECK(env_value(env, "TORCH_NCCL_DUMP_ON_TIMEOUT") == "0");
  CHECK(env_value(env, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == "/mine/dump_");
  // Newer torch's names win over the older ones there: ddprun adds no older name that would look like a choice.
  const auto newer = env_with_heartbeat({"TORCH_FR_DUMP_TEMP_FILE=/mine/fr_", "TORCH_FR_BUFFER_SIZE=100"});
  CHECK_FALSE(has(newer, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"));
  CHECK_FALSE(has(newer, "TORCH_NCCL_TRACE_BUFFER_SIZE"));
  CHECK(env_value(newer, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE") == kPrefix);
}

TEST_CASE("without --hang-timeout no Flight Recorder variable is added") {
  World w;
  w.local_world_size = 1;
  w.world_size = 1;
  const auto env = worker_environment({"PATH=/bin"}, w, {0, "/tmp/e.json", 42, ""});
  for (const char* name : {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                           "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT"})
    CHECK_FALSE(has(env, name));
  CHECK_FALSE(has(env_with_heartbeat({}, false), "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"));
}

TEST_CASE("the capture looks where the worker's torch makes its FIFO and writes its dump: prefix + global rank") {
  const FlightRecorderFiles own = flight_recorder_files({"PATH=/bin"}, "/w/nccl_trace_rank_", 5);
  CHECK(own.pipe == "/w/nccl_trace_rank_5.pipe");
  CHECK(own.dump == "/w/nccl_trace_rank_5");
  CHECK(own.dump_is_ours);
  const FlightRecorderFiles user = flight_recorder_files(
      {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/u/p_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/u/old_", "TORCH_FR_DUMP_TEMP_FILE=/u/new_"},
      "/w/nccl_trace_rank_", 5);
  CHECK(user.pipe == "/u/p_5.pipe");
  CHECK(user.dump == "/u/new_5");  // TORCH_FR_DUMP_TEMP_FILE first, as DebugInfoWriter::getWriter reads them
  CHECK_FALSE(user.dump_is_ours);
  // An empty pipe variable is torch's "no FIFO": nothing to ask.
  CHECK(flight_recorder_files({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE="}, "/w/x_", 0).pipe.empty());
}

TEST_CASE("asking for a dump: one byte to a listening FIFO, nothing else, never blocking") {
  TempDir dir;
  const std::string pipe = dir.path + "/nccl_trace_rank_0.pipe";
  const uid_t me = ::getuid();
  CHECK(ask_for_dump(pipe, me).outcome == DumpAsk::kNoPipe);
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  CHECK(ask_for_dump(pipe, me).outcome == DumpAsk::kNoReader);  // ENXIO at once, not a wait for a reader
  const int reader = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);  // as ProcessGroupNCCL's DumpPipe holds it
  REQUIRE(reader >= 0);
  CHECK(ask_for_dump(pipe, me).outcome == DumpAsk::kSent);
  char buf[16];
  CHECK(::read(reader, buf, sizeof buf) == 1);
  CHECK(ask_for_dump(pipe, me + 1).outcome == DumpAsk::kRefused);  // another user's FIFO is not the worker's
  CHECK(::read(reader, buf, sizeof buf) <= 0);  // nothing came: EOF (no writer) or EAGAIN
  ::close(reader);
  // A regular file or a link at that path is never opened for writing.
  const std::string plain = dir.path + "/plain.pipe";
  std::ofstream(plain) << "keep";
  CHECK(ask_for_dump(plain, me).outcome == DumpAsk::kRefused);
  const std::string link = dir.path + "/link.pipe";
  REQUIRE(::symlink(pipe.c_str(), link.c_str()) == 0);
  CHECK(ask_for_dump(link, me).outcome == DumpAsk::kRefused);
  std::ifstream in(plain);
  std::string text;
  in >> text;
  CHECK(text == "keep");
}

TEST_CASE("a dump counts once written since the ask, not empty, and the same at two looks") {
  const FileMark absent{};
  const FileMark older{100, 1};
  const FileMark growing{10, 5};
  const FileMark whole{200, 6};
  CHECK_FALSE(dump_settled(absent, absent, absent));
  CHECK_FALSE(dump_settled(absent, growing, whole));   // still changing
  CHECK(dump_settled(absent, whole, whole));
  CHECK_FALSE(dump_settled(older, older, older));      // the dump from before the ask
  CHECK(dump_settled(older, whole, whole));
  CHECK_FALSE(dump_settled(absent, FileMark{0, 7}, FileMark{0, 7}));  // created, nothing in it yet
}
