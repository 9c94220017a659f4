// The gradient path of DDP on CPU: a Gloo context of its own, its pairs in synchronous mode, driven by
// one communication thread that reduces buckets in launch order while backward goes on.
//
// Why not ProcessGroupGloo's allreduce: measured on this project's machines (2 vCPUs, loopback), it
// costs ~2 ms even for 1000 floats — a work queue, the transport's event-loop thread and a condition
// variable stand between every message and its reader. Synchronous pairs read the socket on the
// thread that waits (one kernel wake-up per message): ~0.05 ms for 1000 floats. Synchronous sends block,
// so two ranks writing large buffers at each other would deadlock once the socket buffers are full;
// buckets are therefore reduced in segments of at most `segment_bytes`.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "worker_sdk/process_group.hpp"

namespace gloo {
class Algorithm;
namespace rendezvous {
class Context;
}
}  // namespace gloo

namespace ddprun::sdk {

class GlooRing {
 public:
  // Connects a fresh full mesh through the group's store (a collective: every rank constructs it, in the
  // same order relative to other GlooRings). `buffers` are the flat bucket tensors (float or double,
  // CPU, contiguous), reduced in place by sum when launched.
  GlooRing(ProcessGroup& group, const std::vector<at::Tensor>& buffers, std::size_t segment_bytes);
  ~GlooRing();
  GlooRing(const GlooRing&) = delete;
  GlooRing& operator=(const GlooRing&) = delete;

  // True when every buffer is a CPU float/double tensor (otherwise use the process group).
  static bool supports(const std::vector<at::Tensor>& buffers);

  // Queues buffer `index` for reduction (buffers must be launched in the same order on every rank).
  void launch(std::size_t index);
  // Blocks until every launched buffer is reduced; rethrows a communication error.
  void wait_all();
  // Reduces buffer `index` on the calling thread, after wait_all: for the last bucket of a backward,
  // whose caller would only wait anyway, this saves two thread hand-offs. With busy_poll the waiting
  // reads spin instead of sleeping (worth it only when nothing else needs this core meanwhile).
  void run_inline(std::size_t index, bool busy_poll);

 private:
  void run();
  void set_busy_poll(bool on);

  std::shared_ptr<gloo::rendezvous::Context> context_;
  // shared_ptr, not unique_ptr: destroying one needs no complete gloo::Algorithm, so the SDK built without
  // Gloo's headers (gloo_ring_absent.cpp) still defines this class.
  std::vector<std::vector<std::shared_ptr<gloo::Algorithm>>> segments_;  // per buffer
  float handshake_value_ = 0;                                             // the end-of-construction exchange
  std::shared_ptr<gloo::Algorithm> handshake_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<std::size_t> queue_;
  std::size_t in_flight_ = 0;
  bool stop_ = false;
  bool busy_poll_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace ddprun::sdk
