#include "worker_sdk/checkpoint.hpp"
#include "worker_sdk/heartbeat.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "worker_sdk/error.hpp"

namespace ddprun::sdk {
namespace {
// How long a checkpoint save or load may be silent under ddprun --hang-timeout before it counts as hung.
constexpr std::chrono::minutes kCheckpointQuiet{10};
}  // namespace
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error("checkpoint: " + what + " " + path + ": " + std::strerror(errno));
}

void fsync_path(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("cannot fsync", path);
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

void save_checkpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                     std::int64_t epoch, std::int64_t step, std::int64_t step_samples) {
  // Per process: after a peer died every surviving rank may save the same state at once (save_alone).
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  torch::serialize::OutputArchive model_archive, optim_archive, archive;
  model.save(model_archive);
  optimizer.save(optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  archive.write("epoch", torch::tensor(epoch, torch::kLong));
  archive.write("step", torch::tensor(step, torch::kLong));
  archive.write("step_samples", torch::tensor(step_samples, torch::kLong));
  try {
    archive.save_to(tmp);
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    throw Error("checkpoint: cannot write " + tmp + ": " + e.what());
  }
  // Data on disk before the name points at it: otherwise a power cut could leave a renamed, empty file.
  fsync_path(tmp, O_RDONLY);
  // Test hook: die exactly where a crash hurts most, between a complete temp file and the rename.
  if (std::getenv("DDPRUN_SDK_TEST_KILL_BEFORE_RENAME") != nullptr) ::raise(SIGKILL);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp + " to", path);
  fsync_path(parent_dir(path), O_RDONLY | O_DIRECTORY);
}

std::optional<std::int64_t> load_checkpoint(const std::string& path, torch::nn::Module& model,
                                            torch::optim::Optimizer& optimizer, torch::Device device,
                                            std::int64_t* step, std::int64_t* step_samples) {
  if (!exists(path)) return std::nullopt;
  torch::serialize::InputArchive archive, model_archive, optim_archive;
  try {
    archive.load_from(path, device);
    archive.read("model", model_archive);
    archive.read("optimizer", optim_archive);
    model.load(model_archive);
    optimizer.load(optim_archive);
    at::Tensor epoch;
    archive.read("epoch", epoch);
    at::Tensor saved_step;
    if (step) *step = archive.try_read("step", saved_step) ? saved_step.item<std::int64_t>() : 0;
    at::Tensor saved_samples;
    if (step_samples)
      *step_samples = archive.try_read("step_samples", saved_samples) ? saved_samples.item<std::int64_t>() : 0;
    return epoch.item<std::int64_t>();
  } catch (const c10::Error& e) {
    throw Error("checkpoint: cannot load " + path + ": " + e.what_without_backtrace());
  }
}

Checkpointer::Checkpointer(std::string dir, std::shared_ptr<ProcessGroup> group)
    : dir_(std::move(dir)), group_(std::move(group)) {
  if (!dir_.empty() && (!group_ || group_->rank() == 0) && ::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    fail("cannot create directory", dir_);
  }
}

std::string Checkpointer::path() const { return dir_.empty() ? std::string() : dir_ + "/checkpoint.pt"; }

std::int64_t Checkpointer::maybe_resume(bool resume, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                        std::int64_t first_epoch) {
  if (dir_.empty() || !resume) return first_epoch;
  const QuietPhase loading(kCheckpointQuiet);  // ddprun --hang-timeout: a large checkpoint is slow to read
  auto device = group_ ? group_->device() : torch::Device(torch::kCPU);
  std::int64_t step = 0;
  auto epoch = load_checkpoint(path(), model, optimizer, device, &step, &saved_step_samples_);
  if (!epoch) return first_epoch;
  resume_step_ = step;
  return step > 0 ? *epoch : *epoch + 1;
}

std::int64_t Checkpointer::resume_step(std::int64_t step_samples) const {
  if (saved_step_samples_ <= 0 || step_samples <= 0 || step_samples == saved_step_samples_) return resume_step_;
  return resume_step_ * saved_step_samples_ / step_samples;
}

void Checkpointer::save(torch::nn::Module& model, torch::optim::Optimizer& optimizer, std::int64_t epoch,
                        std::int64_t step, std::int64_t step_samples) {
  if (dir_.empty()) return;
  const QuietPhase saving(kCheckpointQuiet);  // rank 0 writes, the others wait at the barrier: all silent
  if (!group_ || group_->rank() == 0) save_checkpoint(path(), model, optimizer, epoch, step, step_samples);
  if (group_) group_->barrier();
}

void Checkpointer::save_alone(torch::nn::Module& model, torch::optim::Optimizer& optimizer, std::int64_t epoch,
                              std::int64_t step, std::int64_t step_samples) {
  if (dir_.empty()) return;
  const QuietPhase saving(kCheckpointQuiet);
  save_checkpoint(path(), model, optimizer, epoch, step, step_samples);
}

}  // namespace ddprun::sdk
