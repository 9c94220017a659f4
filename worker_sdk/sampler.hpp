// PyTorch's torch.utils.data.DistributedSampler, index for index: shuffle with a generator seeded by
// seed + epoch (so every rank draws the same permutation and takes its own stride of it), set_epoch to
// reshuffle, and either drop_last or padding by wrap-around so every rank gets the same count.
#pragma once

#include <cstdint>
#include <vector>

namespace ddprun::sdk {

struct SamplerOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // Throws sdk::Error when rank is not in [0, num_replicas).
  DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, SamplerOptions options = {});

  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }
  // Samples this rank gets per epoch (the same on every rank).
  std::int64_t size() const { return num_samples_; }
  // This rank's indices for the current epoch.
  std::vector<std::int64_t> indices() const;

 private:
  std::int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  SamplerOptions options_;
  std::int64_t epoch_ = 0;
  std::int64_t num_samples_ = 0;
};

}  // namespace ddprun::sdk
