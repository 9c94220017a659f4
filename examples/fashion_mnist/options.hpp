// Command line of the Fashion-MNIST example.
#pragma once

#include <cstdint>
#include <string>

namespace ddprun::examples {

// The defaults are the recipe that reaches >= 90% test accuracy within a few minutes on 2 CPU workers;
// main.cpp ("The recipe") says why each value.
struct TrainOptions {
  int epochs = 4;
  int batch_size = 128;        // per rank
  double lr = 0.1;             // peak learning rate for a global batch of 256, scaled linearly with it
  double momentum = 0.9;       // Nesterov
  double weight_decay = 5e-4;
  double warmup = 0.15;        // fraction of all steps spent warming up (one-cycle)
  std::string schedule = "onecycle";  // or "constant": --lr throughout, no scaling
  std::string norm = "batchnorm";     // per rank; "syncbn": statistics of the global batch; "none"
  std::uint64_t seed = 1;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint_dir;  // empty: no checkpoints and no metrics file
  bool resume = false;
  std::int64_t max_steps = 0;  // total optimizer steps, 0: no limit
  int nproc = 1;               // embedded spawn when not started by ddprun
  int log_every = 100;         // steps between progress lines
  int metrics_every = 10;      // steps between step records of DIR/metrics.jsonl: enough to draw the loss curve
  int threads = 0;             // intra-op threads per rank, 0: OMP_NUM_THREADS or LibTorch's default
  bool help = false;
};

extern const char* const kUsage;

// Throws std::invalid_argument with a one-line message on bad input.
TrainOptions parse_options(int argc, char** argv);

}  // namespace ddprun::examples
