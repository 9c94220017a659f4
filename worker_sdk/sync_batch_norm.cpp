#include "worker_sdk/sync_batch_norm.hpp"

#include <torch/autograd.h>
#include <torch/nn/functional/batchnorm.h>

#include "worker_sdk/error.hpp"

namespace ddprun::sdk {
namespace {

std::vector<int64_t> reduce_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

std::vector<int64_t> channel_shape(const at::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return shape;
}

// The group travels through autograd's saved data as an integer: IValue cannot hold a raw pointer, and
// the module (which owns the group) outlives every graph built from it.
ProcessGroup* group_of(torch::autograd::AutogradContext* ctx) {
  return reinterpret_cast<ProcessGroup*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  // Returns y; mean and biased variance of the global batch come back through `stats` for running stats.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t group_ptr, double eps, at::Tensor stats) {
    auto* group = reinterpret_cast<ProcessGroup*>(static_cast<intptr_t>(group_ptr));
    auto dims = reduce_dims(x);
    const int64_t channels = x.size(1);
    at::Tensor xd = x.to(at::kDouble);  // E[x²] - E[x]² in double: the sums span every rank's batch
    at::Tensor packed = at::cat({xd.sum(dims), (xd * xd).sum(dims),
                                 at::full({1}, static_cast<double>(x.numel() / channels), xd.options())});
    group->allreduce(packed);
    at::Tensor count = packed.narrow(0, 2 * channels, 1);
    at::Tensor mean = packed.narrow(0, 0, channels) / count;
    at::Tensor var = (packed.narrow(0, channels, channels) / count - mean * mean).clamp_min(0);
    at::Tensor invstd = (var + eps).rsqrt();
    stats.copy_(at::cat({mean, var, count}));

    auto shape = channel_shape(x);
    at::Tensor mean_c = mean.to(x.scalar_type()).view(shape);
    at::Tensor invstd_c = invstd.to(x.scalar_type()).view(shape);
    ctx->saved_data["group"] = group_ptr;
    ctx->save_for_backward({x, weight, mean_c, invstd_c, count.to(x.scalar_type())});
    return (x - mean_c) * invstd_c * weight.view(shape) + bias.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const at::Tensor& count = saved[4];
    at::Tensor dy = grads[0].contiguous();
    auto dims = reduce_dims(x);
    const int64_t channels = x.size(1);
    at::Tensor xmu = x - mean;
    at::Tensor sum_dy = dy.sum(dims);
    at::Tensor sum_dy_xmu = (dy * xmu).sum(dims);
    at::Tensor grad_weight = sum_dy_xmu * invstd.view({channels});
    at::Tensor grad_bias = sum_dy;
    at::Tensor packed = at::cat({sum_dy, sum_dy_xmu});
    group_of(ctx)->allreduce(packed);
    auto shape = channel_shape(x);
    at::Tensor mean_dy = (packed.narrow(0, 0, channels) / count).view(shape);
    at::Tensor mean_dy_xmu = (packed.narrow(0, channels, channels) / count).view(shape);
    at::Tensor grad_x = (dy - mean_dy - xmu * invstd * invstd * mean_dy_xmu) * invstd * weight.view(shape);
    return {grad_x, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(int64_t num_features, std::shared_ptr<ProcessGroup> group,
                                     SyncBatchNormOptions options)
    : group_(std::move(group)), options_(options) {
  weight = register_parameter("weight", torch::ones({num_features}));
  bias = register_parameter("bias", torch::zeros({num_features}));
  running_mean = register_buffer("running_mean", torch::zeros({num_features}));
  running_var = register_buffer("running_var", torch::ones({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& x) {
  DDPRUN_SDK_CHECK(x.dim() >= 2 && x.size(1) == weight.size(0),
                   "SyncBatchNorm: expected [N, " + std::to_string(weight.size(0)) + ", ...] input");
  if (!is_training() || !group_ || group_->size() == 1) {
    if (is_training()) num_batches_tracked += 1;
    return torch::batch_norm(x, weight, bias, running_mean, running_var, is_training(), options_.momentum,
                             options_.eps, /*cudnn_enabled=*/true);
  }
  const int64_t channels = x.size(1);
  at::Tensor stats = torch::empty({2 * channels + 1}, x.options().dtype(at::kDouble));
  at::Tensor y = SyncBatchNormFunction::apply(x, weight, bias,
                                              static_cast<int64_t>(reinterpret_cast<intptr_t>(group_.get())),
                                              options_.eps, stats);
  torch::NoGradGuard no_grad;
  at::Tensor mean = stats.narrow(0, 0, channels).to(running_mean.scalar_type());
  double n = stats[2 * channels].item<double>();
  at::Tensor unbiased = stats.narrow(0, channels, channels).to(running_var.scalar_type()) * (n / std::max(n - 1, 1.0));
  running_mean.mul_(1 - options_.momentum).add_(mean, options_.momentum);
  running_var.mul_(1 - options_.momentum).add_(unbiased, options_.momentum);
  num_batches_tracked += 1;
  return y;
}

}  // namespace ddprun::sdk
