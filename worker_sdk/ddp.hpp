// DistributedDataParallel: keeps one module's replicas identical across ranks.
//
// Construction broadcasts parameters and buffers from rank 0. Gradients are averaged by a bucketed
// allreduce that starts *during* backward: a post-hook on every parameter's gradient accumulator marks
// it ready, and a bucket whose parameters are all ready is launched at once (in bucket order, the same
// on every rank, so collectives always match up), overlapping communication with the rest of backward.
// Each parameter's .grad becomes a view into its bucket's flat buffer, so the reduced values land in
// place with no copy back. The end of backward waits for every bucket (an autograd engine callback),
// so `loss.backward(); optimizer.step();` works unchanged.
#pragma once

#include <torch/nn/module.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "worker_sdk/process_group.hpp"

namespace ddprun::sdk {

struct DdpOptions {
  std::size_t bucket_cap_bytes = 25u << 20;         // as PyTorch's bucket_cap_mb=25
  std::size_t first_bucket_cap_bytes = 1u << 20;    // a small first bucket starts communication early
  // False: a parameter that gets no gradient in a synchronised backward is an error (it would leave its
  // bucket unreduced). True: such parameters count as zero gradients on this rank.
  bool expect_unused_parameters = false;
  // CPU float/double gradients go through a Gloo ring of DDP's own with synchronous pairs (see
  // gloo_ring.hpp: ~40x lower latency than ProcessGroupGloo here); false: through the process group.
  bool direct_gloo = true;
  std::size_t segment_bytes = 1u << 20;  // largest message of the direct path
  // The last bucket is reduced by the thread that ran backward (it would only wait otherwise). Its reads
  // may spin rather than sleep, trading a core for wake-up latency: +12% steps/s for the small MLP on an
  // idle machine, but half the speed when the cores are oversubscribed (a spinning rank starves its
  // peer). kAuto spins only when this process may run on more CPUs than there are ranks on the node.
  enum class BusyPoll { kAuto, kAlways, kNever };
  BusyPoll busy_poll_last_bucket = BusyPoll::kAuto;
};

class DistributedDataParallel {
 public:
  // Throws sdk::Error when the module has no parameters that require grad.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }

  // While a NoSync lives, backward only accumulates gradients locally (gradient accumulation); the first
  // backward after it ends reduces the accumulated sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // Broadcasts buffers (e.g. BatchNorm running statistics) from rank 0; PyTorch does this every forward.
  void sync_buffers();

  // Parameter names per bucket, in launch order (for tests and diagnostics).
  std::vector<std::vector<std::string>> bucket_layout() const;

  struct State;  // shared with the autograd hooks, which may outlive nothing but must not dangle

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<State> state_;
};

}  // namespace ddprun::sdk
