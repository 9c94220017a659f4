// Command line of the Fashion-MNIST example.
#pragma once

#include <cstdint>
#include <string>

namespace ddprun::examples {

struct TrainOptions {
  int epochs = 2;
  int batch_size = 64;  // per rank
  double lr = 0.01;
  double momentum = 0.5;
  std::uint64_t seed = 1;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint_dir;  // empty: no checkpoints
  bool resume = false;
  std::int64_t max_steps = 0;  // total optimizer steps, 0: no limit
  int nproc = 1;               // embedded spawn when not started by ddprun
  bool syncbn = false;
  int log_every = 100;
  int threads = 0;             // intra-op threads per rank, 0: OMP_NUM_THREADS or LibTorch's default
  bool help = false;
};

extern const char* const kUsage;

// Throws std::invalid_argument with a one-line message on bad input.
TrainOptions parse_options(int argc, char** argv);

}  // namespace ddprun::examples
