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
// `step_samples`: samples one step took over all ranks (the global batch; 0 = not recorded), so that a run
// resumed with another world size (an elastic job re-formed) can find the same place in the epoch.
void save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                     std::int64_t epoch, std::int64_t step = 0, std::int64_t step_samples = 0);

// Loads into model and optimizer (tensors placed on `device`) and returns the saved epoch, or nullopt
// when `path` does not exist. Throws when the file exists but cannot be read.
// `step`, when given, receives the saved step (0 for a complete epoch or a checkpoint written before
// steps were saved); `step_samples` the saved samples per step (0 when not recorded).
std::optional<std::int64_t> load_checkpoint(const std::string& path, torch::nn::Module& model,
                                            torch::optim::Optimizer& optimizer,
                                            torch::Device device = torch::kCPU, std::int64_t* step = nullptr,
                                            std::int64_t* step_samples = nullptr);

// The per-epoch policy of a training loop: `dir/checkpoint.pt`, written by rank 0 after each epoch
// (the others wait at a barrier, so nobody races ahead of a save), loaded by every rank on resume. Rank 0's
// save is a QuietPhase: under ddprun --hang-timeout neither it nor the ranks waiting for it at the barrier are
// hung until the phase's bound (heartbeat.hpp).
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
  // The same place in steps of `step_samples` samples each (this run's global batch): after an elastic
  // re-form the world size, hence the global batch, may differ from the saved run's. With a strided
  // DistributedSampler the first S steps of G samples cover the first S x G samples of the epoch's order
  // whatever the world size, so this is exact when G divides them, else it repeats less than one step's
  // samples. Equals resume_step() when the global batch is unchanged or was not recorded.
  std::int64_t resume_step(std::int64_t step_samples) const;
  std::int64_t saved_step_samples() const { return saved_step_samples_; }
  void save(torch::nn::Module& model, torch::optim::Optimizer& optimizer, std::int64_t epoch, std::int64_t step = 0,
            std::int64_t step_samples = 0);
  // The same, by this rank alone, with no collective: for when the group is broken (a peer died in the middle
  // of a step: its collective failed here). Every DDP replica holds the same parameters and optimizer state
  // after each completed step, so any surviving rank may save them; several doing so at once is harmless
  // (each writes its own temporary file, then renames it over the same name).
  void save_alone(torch::nn::Module& model, torch::optim::Optimizer& optimizer, std::int64_t epoch,
                  std::int64_t step, std::int64_t step_samples);
  std::string path() const;

 private:
  std::string dir_;
  std::shared_ptr<ProcessGroup> group_;
  std::int64_t resume_step_ = 0;
  std::int64_t saved_step_samples_ = 0;
};

}  // namespace ddprun::sdk
