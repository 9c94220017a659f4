#include "worker_sdk/sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include "worker_sdk/error.hpp"

namespace ddprun::sdk {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank,
                                       SamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  DDPRUN_SDK_CHECK(num_replicas > 0 && rank >= 0 && rank < num_replicas,
                   "DistributedSampler: rank " + std::to_string(rank) + " is not in [0, " +
                       std::to_string(num_replicas) + ")");
  DDPRUN_SDK_CHECK(dataset_size >= 0, "DistributedSampler: negative dataset size");
  const std::int64_t w = num_replicas;
  if (options_.drop_last && dataset_size % w != 0) {
    num_samples_ = (dataset_size - w + w - 1) / w;  // ceil((n - w) / w), as PyTorch
    if (num_samples_ < 0) num_samples_ = 0;
  } else {
    num_samples_ = (dataset_size + w - 1) / w;
  }
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> all;
  all.reserve(static_cast<size_t>(dataset_size_));
  if (options_.shuffle) {
    // The same generator and call as Python's torch.randperm(n, generator=g) with g.manual_seed(seed+epoch),
    // so a C++ and a Python job see the same order.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(options_.seed + static_cast<std::uint64_t>(epoch_));
    at::Tensor perm = torch::randperm(dataset_size_, gen, torch::kLong);
    const auto* p = perm.data_ptr<std::int64_t>();
    all.assign(p, p + dataset_size_);
  } else {
    for (std::int64_t i = 0; i < dataset_size_; ++i) all.push_back(i);
  }
  const std::int64_t total = num_samples_ * num_replicas_;
  if (!options_.drop_last && dataset_size_ > 0) {
    // Pad by repeating the head (the whole list as often as needed) up to total.
    for (std::int64_t i = 0; static_cast<std::int64_t>(all.size()) < total; ++i) all.push_back(all[static_cast<size_t>(i)]);
  }
  all.resize(static_cast<size_t>(total));
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (std::int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace ddprun::sdk
