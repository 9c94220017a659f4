// ddprun's console: its own stdout and stderr, written by a thread of their own once the agent runs, so
// that the event loop never waits on a reader. A terminal paused with Ctrl-S, `| less` at its prompt, a
// stalled ssh or tee only fill a queue here; supervision (SIGCHLD, signals, heartbeats, the in-process
// rendezvous server) goes on, and the workers are slowed through their own pipes (the agent stops reading
// them while a channel is congested), never the loop.
//
// - One channel per open file: when stdout and stderr are the same file (a terminal), they share one
//   channel and one thread, so ddprun's lines and the workers' lines keep their order there.
// - Every piece given to `write` is written whole, in order; pieces are whole lines (the agent's framer
//   and the logger make them so), so a line is never split.
// - A reader gone for good (EPIPE, EIO: a closed terminal, `| head` that exited) breaks the channel: what
//   is queued and what comes later is dropped and counted (bytes, lines); the job goes on. `stats` tells.
// - Before `start` (command-line errors, set-up) writes go straight to the fd, blocking, as any program's.
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/write_queue.hpp"

namespace ddprun::console {

using ChannelStats = WriteQueueStats;  // common/write_queue.hpp: each channel is one WriteQueue

// Starts the writer threads for fds 1 and 2. `high_water`: queued bytes above which `congested` says so.
// Call once, after every fork of a single-threaded process is done (the job guard); all signals are
// blocked in the writer threads, so the agent's signalfd sees every signal.
void start(std::size_t high_water);
// `on_room` is called (from a writer thread) when a congested channel has drained below half of
// high_water. Replacing it (with nullptr too) waits for a call under way: after it returns, the old
// callback is never called again.
void set_on_room(std::function<void()> on_room);
bool started();

// Queues `data` for fd 1 or 2 (other fds: written directly). Never blocks once started.
void write(int fd, std::string_view data);
// The same without a copy: the buffer (Buffer::take) is queued as it is.
void write(int fd, Buffer&& data);
// More than high_water bytes wait on fd's channel: stop feeding it until on_room.
bool congested(int fd);

// Waits until every channel has written what it holds (or broke), or until one of `interrupt`'s signals
// (blocked by the caller) arrives. Returns false when interrupted: what is left is then abandoned and
// counted lost. Used once at exit, after the job's outcome is settled.
bool drain(const sigset_t& interrupt);
// Gives the writer threads at most 250 ms to act on what they hold: returns once every channel has written it,
// broke on it (EPIPE: its loss is counted) or waits on a stalled reader (WriteQueue::stalled: 100 ms). Used at
// exit, after the agent's loop has stopped, before the summary, so that the lines it counts lost include those
// the writer had not tried yet (the writer thread may not have run since the last workers' lines were queued).
void settle();
// Drops what is queued and everything written later (counted lost): the user stopped waiting for it.
void abandon();
// The same, for the channels whose reader stalls (congested, or a write waiting on it); healthy ones go on.
void abandon_stalled();

// fd 1's or fd 2's channel (the same one when they share a file).
ChannelStats stats(int fd);
// stdout and stderr are one file (a terminal), hence one channel.
bool shared_channel();
// "stdout" / "stderr" / "stdout and stderr": how the user knows fd's channel.
std::string channel_name(int fd);

}  // namespace ddprun::console
