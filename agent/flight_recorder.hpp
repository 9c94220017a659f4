// PyTorch's NCCL Flight Recorder, asked for its dump before a hung job is killed (README "Hang detection").
//
// The contract, as ProcessGroupNCCL keeps it (read in pytorch/pytorch: torch/csrc/distributed/c10d/
// ProcessGroupNCCL.cpp, `struct DumpPipe`, `watchdogHandler` (2.2) / `heartbeatMonitor` and later
// `HeartbeatMonitor::runLoop`; NCCLUtils.cpp, later FlightRecorder.cpp, `DebugInfoWriter::getWriter`;
// pytorch#115139 and #115770, December 2023, so PyTorch 2.2 on):
//  - The process group with uid 0 (the default group, whose rank is the global rank: RANK under ddprun) makes a
//    FIFO named TORCH_NCCL_DEBUG_INFO_PIPE_FILE + rank + ".pipe" (unlinking what was there, mkfifo 0666 under
//    the umask) and keeps it open O_RDONLY|O_NONBLOCK. Only when that variable is non-empty and
//    TORCH_NCCL_TRACE_BUFFER_SIZE > 0: with no recorder there is no FIFO.
//  - A thread read()s it now and then; any byte read starts an asynchronous dump of the recorder's ring buffer
//    to TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank (default /tmp/nccl_trace_rank_; newer torch reads
//    TORCH_FR_DUMP_TEMP_FILE first, default ~/.cache/torch/comm_lib_trace_rank_), written with one ofstream,
//    not renamed into place. The training goes on: more bytes, more dumps.
//  - How often it reads: in 2.2 the watchdog thread, on each pass of its loop. Later, the heartbeat monitor
//    thread: every TORCH_NCCL_COORD_CHECK_MILSEC (1000 ms) when TORCH_NCCL_DUMP_ON_TIMEOUT is on, but only every
//    TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (480 s) when it is off, which was the default until December 2024
//    (pytorch#143446: torch 2.6): that is why ddprun turns it on with the recorder.
//    TORCH_NCCL_TRACE_BUFFER_SIZE defaulted to 0 (no recorder) until pytorch#142260, 2000 since (torch 2.6).
// The agent's side: write one byte without ever blocking (O_NONBLOCK: a FIFO without a reader fails with ENXIO
// at once instead of waiting for one), then wait, bounded, for the file to appear.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::agent {

// The name ddprun gives both prefixes inside a worker's private directory: torch's own default file name, so
// the dump reads as it would anywhere else ("nccl_trace_rank_3"), the FIFO beside it ("nccl_trace_rank_3.pipe").
inline constexpr const char* kFlightRecorderPrefixName = "nccl_trace_rank_";
// Where one worker's recorder listens and dumps, given the agent's environment (what the user set) and the
// prefix ddprun uses when the user set none (`own_prefix`, in the worker's private directory).
struct FlightRecorderFiles {
  std::string pipe;  // "" when the user turned the FIFO off (an empty TORCH_NCCL_DEBUG_INFO_PIPE_FILE)
  std::string dump;
  bool dump_is_ours = false;  // in ddprun's private work tree: waited for, kept, copied to --log-dir
};
FlightRecorderFiles flight_recorder_files(const std::vector<std::string>& user_env, const std::string& own_prefix,
                                          int rank);

enum class DumpAsk {
  kSent,      // one byte is in the FIFO: a reader is there to take it
  kNoPipe,    // no FIFO: not an NCCL worker, or a recorder that is off; nothing to do
  kNoReader,  // ENXIO: the FIFO is left from a process that is gone; nothing to wait for
  kRefused,   // something other than the worker's own FIFO is at that path: not touched
  kFailed,
};
struct DumpAskResult {
  DumpAsk outcome = DumpAsk::kNoPipe;
  std::string detail;  // for kRefused and kFailed: why, fit for a note in the stacks file
};
// Asks the recorder listening on `pipe` for a dump: only a FIFO owned by `owner` (the worker's uid), opened
// without following a link and without blocking. Costs a few system calls; never waits.
DumpAskResult ask_for_dump(const std::string& pipe, uid_t owner);

// The uid a process runs as (the owner of /proc/PID); -1 when it is gone.
uid_t process_uid(pid_t pid);

// A file as the dump wait sees it: absent (size -1), or its size and modification time.
struct FileMark {
  long long size = -1;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileMark& o) const { return size == o.size && mtime_ns == o.mtime_ns; }
  bool operator!=(const FileMark& o) const { return !(*this == o); }
};
FileMark file_mark(const std::string& path);

// A dump that is there: written since `before` (absent, or an older dump), not empty, and the same at two
// looks in a row (torch writes it with one ofstream, so a file still growing is not yet whole).
bool dump_settled(const FileMark& before, const FileMark& previous, const FileMark& now);

}  // namespace ddprun::agent
