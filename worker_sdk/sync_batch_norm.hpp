// BatchNorm whose batch statistics are those of the global batch: in forward the per-channel sum, sum of
// squares and count are summed over ranks; in backward the per-channel sums of dy and dy·(x-mean) are.
// Weight and bias gradients stay local (DDP averages them), as in PyTorch's SyncBatchNorm.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "worker_sdk/process_group.hpp"

namespace ddprun::sdk {

struct SyncBatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
};

class SyncBatchNormImpl : public torch::nn::Module {
 public:
  // group null (or of size 1): behaves as plain BatchNorm.
  SyncBatchNormImpl(int64_t num_features, std::shared_ptr<ProcessGroup> group, SyncBatchNormOptions options = {});

  // x: [N, C, *]. Training mode uses (and updates running stats from) the global batch statistics.
  at::Tensor forward(const at::Tensor& x);

  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::shared_ptr<ProcessGroup> group_;
  SyncBatchNormOptions options_;
};
TORCH_MODULE(SyncBatchNorm);

}  // namespace ddprun::sdk
