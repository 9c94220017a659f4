// "Stop requested": how a training loop learns that the job is about to be preempted (SLURM's
// --signal=B:USR1@120, a scheduler's SIGTERM forwarded by ddprun) so it can checkpoint and exit 0 within
// the grace period instead of being killed mid-step.
//
// The signal handler only stores the signal number in a lock-free atomic (async-signal-safe); the loop
// polls it between steps. Ranks get the signal at slightly different moments, so a loop that stops must
// first agree with the other ranks (stop_requested_on_any_rank), or one rank would leave a collective
// that the others then wait in.
#pragma once

namespace ddprun::sdk {

// From now on SIGUSR1 and SIGTERM set the flag instead of killing. Call it first in the worker, from the
// main thread, before anything starts threads (the process group, LibTorch's pools): it blocks both signals
// in the calling thread, so every thread started later inherits the block and none of their system calls
// is ever interrupted by them; one thread of its own takes them with sigwait. (A handler is installed too,
// for threads that already ran.) Idempotent. Until a program calls it, both signals keep their default
// action: a program that cannot stop cleanly is still killed by SIGTERM.
void enable_stop_request();

// True once SIGUSR1 or SIGTERM arrived after enable_stop_request() (or request_stop() was called).
bool stop_requested();

// The signal that asked first (SIGUSR1 or SIGTERM), 0 when none or when request_stop() was called.
int stop_signal();

// Sets the flag as a signal would (`signal` = 0: asked by the program itself). For tests and for a
// loop that decides to stop for its own reasons (a wall-clock budget).
void request_stop(int signal = 0);

// A collective: true when any rank of `group` has a stop request. Every rank must call it at the same
// point of its loop (e.g. after each optimizer step). `Group` is anything with `double sum(double)`,
// such as sdk::ProcessGroup.
template <typename Group>
bool stop_requested_on_any_rank(Group& group) {
  return group.sum(stop_requested() ? 1.0 : 0.0) > 0.0;
}

}  // namespace ddprun::sdk
