// A detached thread for ddprun's own background work (a log file's writer, the metrics textfile's writer):
// every signal blocked in it, so that the agent's signalfd sees them all, and a small stack.
//
// Why small (issue 33): with --log-dir --tee there is a writer per log file, and glibc's default stack is the
// RLIMIT_STACK size (8 MiB): 16 workers made 35 threads and 1.2 GiB of address space, and `ulimit -v 1048576`
// ended the job with "internal error". The writers call write(2) in a loop; 256 KiB is far more than they use.
// A thread that cannot be made is the system refusing (SystemError: exit 71), naming the resource.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace ddprun {

inline constexpr std::size_t kBackgroundThreadStack = 256 * 1024;

// Starts `body` on a new detached thread; throws SystemError ("cannot start <what>'s thread: ...") on failure.
void start_background_thread(const std::string& what, std::function<void()> body);

}  // namespace ddprun
