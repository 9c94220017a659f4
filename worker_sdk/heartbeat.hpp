// Heartbeats for ddprun's hang detection (`ddprun --hang-timeout SEC`, README "Hang detection").
//
// The SDK beats by itself after every collective (ProcessGroup) and every DDP backward; call heartbeat(step)
// once per training step to add the step number to the root cause when a rank hangs. Both are a store into
// the shared page ddprun hands each worker (DDPRUN_HEARTBEAT_FD/_OFFSET): no system call, no lock, safe
// from any thread; outside ddprun, or without --hang-timeout, they do nothing.
#pragma once

#include <cstdint>

namespace ddprun::sdk {

// Alive, at training step `step` (>= 0).
void heartbeat(std::int64_t step);
// Alive; the last step given stays as it was.
void heartbeat();

}  // namespace ddprun::sdk
