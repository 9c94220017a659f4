#include "agent/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/contract/worker_contract.hpp"

namespace ddprun::agent {
namespace c = ddprun::contract;

namespace {
// Whether NAME is in the environment at all: set to "", torch takes the empty value as the user's choice too.
bool is_set(const std::vector<std::string>& env, std::string_view name) {
  return std::any_of(env.begin(), env.end(), [&](const std::string& e) {
    return e.size() > name.size() && e[name.size()] == '=' && e.compare(0, name.size(), name) == 0;
  });
}
}  // namespace

FlightRecorderFiles flight_recorder_files(const std::vector<std::string>& user_env, const std::string& own_prefix,
                                          int rank) {
  FlightRecorderFiles f;
  const std::string r = std::to_string(rank);
  const std::string pipe_prefix = c::env_value(user_env, c::kNcclPipeFile, own_prefix);
  if (!pipe_prefix.empty()) f.pipe = pipe_prefix + r + ".pipe";
  // The order torch reads them in (DebugInfoWriter::getWriter): the newer name first.
  for (const char* name : {c::kFrDumpFile, c::kNcclDumpFile})
    if (is_set(user_env, name)) {
      f.dump = c::env_value(user_env, name) + r;
      return f;
    }
  f.dump = own_prefix + r;
  f.dump_is_ours = true;
  return f;
}

DumpAskResult ask_for_dump(const std::string& pipe, uid_t owner) {
  struct stat before {};
  if (::lstat(pipe.c_str(), &before) != 0)
    return errno == ENOENT ? DumpAskResult{DumpAsk::kNoPipe, ""}
                           : DumpAskResult{DumpAsk::kFailed, std::string("cannot stat it: ") + std::strerror(errno)};
  if (!S_ISFIFO(before.st_mode) || before.st_uid != owner)
    return {DumpAsk::kRefused, "not a FIFO of the worker's user"};
  // O_NONBLOCK: without it, opening a FIFO nobody reads waits for a reader, holding the agent's loop; with it
  // that is ENXIO at once. O_NOFOLLOW: the path was checked above, but could be swapped for a link since.
  const int fd = ::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO) return {DumpAsk::kNoReader, ""};
    if (errno == ENOENT) return {DumpAsk::kNoPipe, ""};
    return {DumpAsk::kFailed, std::string("cannot open it: ") + std::strerror(errno)};
  }
  struct stat opened {};
  DumpAskResult result{DumpAsk::kSent, ""};
  if (::fstat(fd, &opened) != 0 || !S_ISFIFO(opened.st_mode) || opened.st_dev != before.st_dev ||
      opened.st_ino != before.st_ino || opened.st_uid != owner) {
    result = {DumpAsk::kRefused, "replaced while it was opened"};
  } else {
    const char byte = '1';
    ssize_t n = 0;
    do n = ::write(fd, &byte, 1);
    while (n < 0 && errno == EINTR);
    // EAGAIN: the FIFO's buffer is full of requests nobody read yet; one more adds nothing.
    if (n < 0 && errno != EAGAIN) result = {DumpAsk::kFailed, std::string("cannot write to it: ") + std::strerror(errno)};
  }
  ::close(fd);
  return result;
}

uid_t process_uid(pid_t pid) {
  struct stat st {};
  const std::string dir = "/proc/" + std::to_string(pid);
  return ::stat(dir.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

FileMark file_mark(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<long long>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

bool dump_settled(const FileMark& before, const FileMark& previous, const FileMark& now) {
  return now.size > 0 && now != before && now == previous;
}

}  // namespace ddprun::agent
