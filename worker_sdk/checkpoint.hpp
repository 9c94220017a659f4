// Checkpoints of model + optimizer + epoch. Rank 0 writes them atomically (temp file, fsync, rename,
// fsync of the directory), so a crash at any moment leaves either the previous checkpoint or the new one,
// never a torn file. Every rank loads on resume.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "worker_sdk/process_group.hpp"

namespace ddprun::sdk {

// Writes atomically to `path`. Throws sdk::Error (naming the path and errno's text) on failure; the
// previous file at `path` is untouched then. `step`: optimizer steps already taken in `epoch` when the
// epoch is incomplete (a stop request mid-epoch, see stop_request.hpp); 0 when `epoch` is complete.
void save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                     std::int64_t epoch, std::int64_t step = 0);

// Loads into model and optimizer (tensors placed on `device`) and returns the saved epoch, or nullopt
// when `path` does not exist. Throws when the file exists but cannot be read.
// `step`, when given, receives the saved step (0 for a complete epoch or a checkpoint written before
// steps were saved).
std::optional<std::int64_t> load_checkpoint(const std::string& path, torch::nn::Module& model,
                                            torch::optim::Optimizer& optimizer,
                                            torch::Device device = torch::kCPU, std::int64_t* step = nullptr);

// The per-epoch policy of a training loop: `dir/checkpoint.pt`, written by rank 0 after each epoch
// (the others wait at a barrier, so nobody races ahead of a save), loaded by every rank on resume.
class Checkpointer {
 public:
  // dir empty: checkpoints are off. Creates dir if needed.
  Checkpointer(std::string dir, std::shared_ptr<ProcessGroup> group);

  // Resumes when `resume` (e.g. --resume, or TORCHELASTIC_RESTART_COUNT > 0) and a checkpoint exists.
  // Returns the first epoch to run: the saved epoch + 1, or `first_epoch` when starting afresh, or the
  // saved epoch itself when it was saved incomplete (then resume_step() says how far it got).
  std::int64_t maybe_resume(bool resume, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            std::int64_t first_epoch = 1);
  // Steps of the first epoch already done by the run resumed from (0: start the epoch from its beginning).
  std::int64_t resume_step() const { return resume_step_; }
  void save(torch::nn::Module& model, torch::optim::Optimizer& optimizer, std::int64_t epoch, std::int64_t step = 0);
  std::string path() const;

 private:
  std::string dir_;
  std::shared_ptr<ProcessGroup> group_;
  std::int64_t resume_step_ = 0;
};

}  // namespace ddprun::sdk
