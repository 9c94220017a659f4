// When is a worker hung? A pure function of the beats read from the heartbeat channel and the time, so
// every rule is unit-tested without processes or clocks (tests/agent/hang_watch_test.cpp).
//
// Rules:
//   - a worker that never beat is exempt (not every program beats), unless `initial_timeout` is set: then
//     it is hung once that long has passed since `started_ns` without a first beat; a worker kept through a
//     re-form in place (`promised`: alive in the job before) owes its first beat within `timeout` instead;
//   - a worker whose last beat is `timeout` old or older is hung, unless it declared a quiet phase that has
//     not ended yet (an evaluation, a checkpoint: "silent for at most T from now"); past its end, it is;
//   - a worker the job-wide inquiry found waiting for another rank's quiet phase is exempt until that phase's
//     bound (exempt_until_ns);
//   - while a quiet phase or an exemption holds a deadline beyond the last beat's, the timer looks again
//     within the discovery period: the phase may end early, and its closing beat's deadline is sooner;
//   - a beat time in the future counts as "now" (a worker writing another clock than CLOCK_MONOTONIC:
//     it is never found hung, which is why the README names the clock);
//   - the one agent timer is armed for the earliest deadline among the beating workers, and at most
//     `discovery` ahead while some worker has not beaten yet (its first beat must be seen before its
//     deadline passes; with discovery = timeout / 4 it always is).
// While every worker beats steadily the timer fires about once per timeout, whatever the number of workers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/heartbeat_channel.hpp"
#include "rendezvous/hang_verdict.hpp"

namespace ddprun::agent {

struct WatchedWorker {
  int local_rank = 0;
  Beat beat;
  std::int64_t started_ns = 0;  // CLOCK_MONOTONIC; for the initial timeout
  // Not judged before this (CLOCK_MONOTONIC; 0: none): the job-wide inquiry found this worker waiting for a
  // rank that declared a quiet phase (a save on rank 0 while the others wait in a barrier).
  std::int64_t exempt_until_ns = 0;
  // Alive in the job before this round (kept through a re-form in place): its first beat of this round is due
  // within the hang timeout of `started_ns`, not only the initial timeout (issue 56).
  bool promised = false;
};

struct HangCheck {
  std::vector<int> hung;                    // local ranks, in the order given
  std::optional<std::int64_t> next_check_ns;  // when to look again; none: nothing to watch
};

HangCheck check_hangs(const std::vector<WatchedWorker>& running, std::int64_t timeout_ns, std::int64_t now_ns,
                      std::int64_t initial_timeout_ns = 0);

// How often to look for first beats: a quarter of the timeout, at most a second, at least 10 ms.
std::int64_t discovery_period_ns(std::int64_t timeout_ns);

// The torch.distributed call a Python worker's stacks (faulthandler's text, most recent call first) show it
// in: the function of the innermost frame in distributed_c10d.py ("all_reduce", "barrier"), "" when none. The
// hang verdict compares it across ranks (rendezvous/hang_verdict.hpp).
// A thread whose innermost frame is inside torch.autograd's backward gives "backward": with DDP that is the
// reducer's gradient all-reduce, the README loop's waiting ranks.
std::string torch_collective_in(const std::string& python_stacks);

// The same from a worker's native stacks (eu-stack or gdb text), for a C++ worker with no Python stacks:
// "gloo", "nccl" or "backward" (DDP's reducer) when some thread waits for the other ranks; "" when none does.
std::string native_collective_in(const std::string& native_stacks);

}  // namespace ddprun::agent

namespace ddprun::agent {

// The root cause's message for a hung worker: rendezvous/hang_verdict.hpp (the server composes the job-wide
// verdict with it; the agent, when it decides alone).
using rendezvous::hang_message;

}  // namespace ddprun::agent
