// Fashion-MNIST with the worker SDK: the seeds' CNN trained data-parallel, evaluated on the test set
// with accuracy reduced across ranks, checkpointed each epoch (and on a stop request), with a progress
// display and metrics as JSON lines. Runs under ddprun, or alone with --nproc.
//
// The recipe (the defaults, options.hpp): >= 90% test accuracy in 4 epochs, about 2 minutes on 2 CPU
// workers. Each choice is about reaching a good accuracy in few epochs, since epochs are what cost time:
// - BatchNorm after each convolution (per rank, as PyTorch DDP's default; --norm syncbn reduces the
//   statistics over the ranks at the price of two collectives per layer and step). It is what lets the
//   network take a high learning rate from the first step: without it, lr 0.1 with momentum 0.9 diverges
//   and the safe lr needs twice the epochs for the same accuracy.
// - Global batch 256 (128 per rank on 2 workers): large enough that a step's fixed costs (the gradient
//   allreduce, the Python-free but still per-call LibTorch overhead) are small against its compute,
//   small enough that 4 epochs are still ~940 steps.
// - The learning rate scales linearly with the global batch (peak = --lr x global batch / 256, Goyal et
//   al., "Accurate, Large Minibatch SGD"): 1 rank x 256 and 2 ranks x 128 take the same steps with the
//   same rates, which is what makes their accuracies comparable (scripts/bench/sdk_accuracy_bench.sh).
// - One-cycle schedule per step: a linear warm-up from a tenth of the peak over the first 15% of the
//   steps (the early, large gradients of a fresh network with a large lr), then a cosine decay to zero.
//   The decay to zero is where most of the final accuracy comes from in a short run.
// - Nesterov momentum 0.9 and weight decay 5e-4: the usual pair for SGD on small CNNs; the decay keeps
//   the fully connected layer (800x500, most of the weights) from overfitting in the last epoch.
#include <sys/stat.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "examples/fashion_mnist/idx.hpp"
#include "examples/fashion_mnist/net.hpp"
#include "examples/fashion_mnist/options.hpp"
#include "worker_sdk/sdk.hpp"

namespace ex = ddprun::examples;
namespace sdk = ddprun::sdk;

namespace {

struct Split {
  at::Tensor images;  // [N, 1, 28, 28] float, normalised
  at::Tensor labels;  // [N] long
};

// Mean and standard deviation of Fashion-MNIST's training pixels.
// The longest a silent phase (loading the data set, an evaluation pass) may take under ddprun --hang-timeout.
constexpr std::chrono::minutes kQuietAtMost{10};
// An exception's first line (LibTorch's carry a C++ backtrace after it).
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The wall clock in Unix milliseconds: the time of ddprun's --events-file, so the step rates of the metrics
// and the job's events share one time axis.
int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// This rank's steps per second between two metrics records (its own clock: a slow rank's is its own).
struct StepRate {
  std::chrono::steady_clock::time_point since;
  int64_t steps = 0;

  double per_second(std::chrono::steady_clock::time_point now) {
    const double seconds = std::chrono::duration<double>(now - since).count();
    const double rate = seconds > 0 ? static_cast<double>(steps) / seconds : 0;
    since = now;
    steps = 0;
    return rate;
  }
};

constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;

Split load_split(const std::string& dir, const std::string& prefix) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  struct stat st {};
  if (::stat(images_path.c_str(), &st) != 0 || ::stat(labels_path.c_str(), &st) != 0) {
    throw sdk::Error("Fashion-MNIST not found: " + images_path + " or " + labels_path +
                     " is missing. Install the Debian package dataset-fashion-mnist (scripts/setup does), "
                     "or point --data-dir at a directory holding the gzipped IDX files");
  }
  ex::IdxArray images = ex::read_idx(images_path);
  ex::IdxArray labels = ex::read_idx(labels_path);
  if (images.dims.size() != 3 || labels.dims.size() != 1 || images.dims[0] != labels.dims[0] ||
      images.dims[1] != 28 || images.dims[2] != 28) {
    throw sdk::Error("Fashion-MNIST files in " + dir + " have unexpected shapes (want N×28×28 images, N labels)");
  }
  const int64_t n = images.dims[0];
  Split s;
  s.images = torch::from_blob(images.data.data(), {n, 1, 28, 28}, torch::kUInt8)
                 .to(torch::kFloat)
                 .div_(255)
                 .sub_(kMean)
                 .div_(kStd);
  s.labels = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kLong);
  return s;
}

// The learning rate of optimizer step `step` (0-based) out of `total`: see "The recipe" above.
double learning_rate(const ex::TrainOptions& o, int64_t global_batch, int64_t step, int64_t total) {
  if (o.schedule == "constant") return o.lr;
  const double peak = o.lr * static_cast<double>(global_batch) / 256.0;
  const double warm = std::floor(o.warmup * static_cast<double>(total));
  const double s = static_cast<double>(step);
  if (s < warm) return peak * (0.1 + 0.9 * s / warm);
  const double span = std::max(1.0, static_cast<double>(total) - warm);
  return peak * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, (s - warm) / span)));
}

void set_learning_rate(torch::optim::SGD& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

// Each rank evaluates every W-th test sample (no padding, so nothing is counted twice); the sums meet in
// one collective together with the epoch's training-loss sums. Fills the row's losses and accuracy.
void evaluate(ex::Net& model, const Split& test, sdk::ProcessGroup& pg, double train_loss_sum, double train_count,
              sdk::EpochRow& row) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t n = test.labels.size(0);
  at::Tensor mine = torch::arange(pg.rank(), n, pg.size(), torch::kLong);
  double loss_sum = 0, correct = 0;
  for (int64_t i = 0; i < mine.size(0); i += 1000) {
    at::Tensor idx = mine.narrow(0, i, std::min<int64_t>(1000, mine.size(0) - i));
    at::Tensor y = test.labels.index_select(0, idx).to(pg.device());
    at::Tensor out = model->forward(test.images.index_select(0, idx).to(pg.device()));
    loss_sum += torch::nll_loss(out, y, {}, at::Reduction::Sum).item<double>();
    correct += out.argmax(1).eq(y).sum().item<double>();
  }
  auto total = pg.sum(std::vector<double>{loss_sum, correct, static_cast<double>(mine.size(0)), train_loss_sum,
                                          train_count});
  row.test_loss = total[0] / total[2];
  row.accuracy = 100.0 * total[1] / total[2];
  row.train_loss = total[4] > 0 ? total[3] / total[4] : std::nan("");
  if (pg.rank() == 0) {
    std::printf("epoch %lld test_loss %.4f accuracy %.2f%%\n", static_cast<long long>(row.epoch), row.test_loss,
                row.accuracy);
    std::fflush(stdout);
  }
}

std::string signal_text(int signal) {
  if (signal == 0) return "another rank's signal";
  const char* name = sigabbrev_np(signal);
  return name ? std::string("SIG") + name : "signal " + std::to_string(signal);
}

int train(const sdk::WorldInfo& world, const ex::TrainOptions& opts) {
  // First thing: a SIGTERM or SIGUSR1 from now on asks for a checkpoint instead of killing the rank.
  sdk::enable_stop_request();
  if (opts.threads > 0) torch::set_num_threads(opts.threads);
  auto pg = sdk::ProcessGroup::init(world);
  const bool rank0 = pg->rank() == 0;
  torch::manual_seed(static_cast<int64_t>(opts.seed));
  ex::Net model(opts.norm == "syncbn" ? pg : nullptr, opts.norm == "batchnorm");
  model->to(pg->device());  // cuda:LOCAL_RANK when this rank has a GPU: gradients then go through NCCL
  if (rank0) std::cout << "training on " << pg->device() << std::endl;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(opts.lr)
                                                       .momentum(opts.momentum)
                                                       .nesterov(opts.momentum > 0)
                                                       .weight_decay(opts.weight_decay));
  sdk::Checkpointer checkpointer(opts.checkpoint_dir, pg);
  const int64_t first_epoch = checkpointer.maybe_resume(opts.resume || world.restart_count > 0, *model, optimizer);
  // The global batch may differ from the saved run's (an elastic job re-formed with another world size): the
  // place in the epoch carries over in samples, and the strided sampler re-partitions the rest of the epoch.
  const int64_t global_batch = static_cast<int64_t>(opts.batch_size) * pg->size();
  const int64_t first_step = checkpointer.resume_step(global_batch);
  const bool resumed = first_epoch > 1 || first_step > 0 || checkpointer.resume_step() > 0;
  if (resumed && rank0) {
    std::cout << "resumed from " << checkpointer.path() << " at epoch " << first_epoch;
    if (first_step > 0) std::cout << " step " << first_step;
    if (checkpointer.resume_step() > 0 && checkpointer.saved_step_samples() != global_batch &&
        checkpointer.saved_step_samples() > 0)
      std::cout << " (saved at step " << checkpointer.resume_step() << " of global batch "
                << checkpointer.saved_step_samples() << "; now global batch " << global_batch << " over "
                << pg->size() << (pg->size() == 1 ? " rank" : " ranks") << ")";
    std::cout << std::endl;
  }
  sdk::DistributedDataParallel ddp(model.ptr(), pg);

  // Loading is silent (the SDK beat when the group formed): under ddprun --hang-timeout it is a quiet phase,
  // so the example is safe at any timeout longer than its slowest step.
  std::optional<sdk::QuietPhase> loading(std::in_place, kQuietAtMost);
  const Split train_set = load_split(opts.data_dir, "train");
  const Split test_set = load_split(opts.data_dir, "t10k");
  loading.reset();
  sdk::SamplerOptions sampler_options;
  sampler_options.seed = opts.seed;
  sdk::DistributedSampler sampler(train_set.labels.size(0), pg->size(), pg->rank(), sampler_options);

  const int64_t steps_per_epoch = (sampler.size() + opts.batch_size - 1) / opts.batch_size;
  int64_t total_steps = steps_per_epoch * opts.epochs;
  if (opts.max_steps > 0) total_steps = std::min(total_steps, opts.max_steps);
  int64_t step = (first_epoch - 1) * steps_per_epoch + first_step;  // optimizer steps of the whole run
  if (rank0) {
    std::printf("recipe: global batch %lld (%d x %d), peak lr %.4f %s, Nesterov momentum %.2f, weight decay %g, "
                "norm %s; %lld steps\n",
                static_cast<long long>(global_batch), pg->size(), opts.batch_size,
                learning_rate(opts, global_batch, static_cast<int64_t>(opts.warmup * static_cast<double>(total_steps)), total_steps),
                opts.schedule == "onecycle" ? "one-cycle" : "constant", opts.momentum, opts.weight_decay,
                opts.norm.c_str(), static_cast<long long>(total_steps));
    std::fflush(stdout);
  }

  sdk::MetricsLog metrics;
  if (rank0 && !opts.checkpoint_dir.empty()) metrics = sdk::MetricsLog(opts.checkpoint_dir + "/metrics.jsonl", resumed);
  sdk::Progress progress(rank0, sdk::stdout_is_terminal(), opts.epochs, total_steps - step, global_batch);
  std::vector<sdk::EpochRow> rows;
  const auto run_start = std::chrono::steady_clock::now();
  StepRate rates{run_start};
  bool stopped = false;

  // Where the last completed step left the model: what a rank saves alone when the group breaks.
  int64_t at_epoch = first_epoch, done_in_epoch = 0;
  try {
    for (int64_t epoch = first_epoch; epoch <= opts.epochs && step < total_steps && !stopped; ++epoch) {
      sampler.set_epoch(epoch);
      auto order = sampler.indices();
      at::Tensor order_t = torch::from_blob(order.data(), {static_cast<int64_t>(order.size())}, torch::kLong);
      model->train();
      const int64_t start = epoch == first_epoch ? first_step : 0;
      at_epoch = epoch;
      done_in_epoch = start;
      progress.begin_epoch(epoch, steps_per_epoch, start);
      double loss_sum = 0, loss_count = 0;
      for (int64_t s = start; s < steps_per_epoch && step < total_steps; ++s) {
        at::Tensor idx = order_t.narrow(0, s * opts.batch_size, std::min<int64_t>(opts.batch_size, sampler.size() - s * opts.batch_size));
        const double lr = learning_rate(opts, global_batch, step, total_steps);
        set_learning_rate(optimizer, lr);
        optimizer.zero_grad();
        at::Tensor loss = torch::nll_loss(model->forward(train_set.images.index_select(0, idx).to(pg->device())),
                                          train_set.labels.index_select(0, idx).to(pg->device()));
        loss.backward();
        optimizer.step();
        ++step;
        // The step number for ddprun's live view and a hang's root cause (the SDK beats by itself after every
        // collective; this adds where the rank was).
        sdk::heartbeat(step);
        done_in_epoch = s + 1;
        const double local_loss = loss.item<double>();
        loss_sum += local_loss * static_cast<double>(idx.size(0));
        loss_count += static_cast<double>(idx.size(0));
        progress.step(s + 1, local_loss);
        ++rates.steps;
        const bool log_now = (s + 1) % opts.log_every == 0, record_now = (s + 1) % opts.metrics_every == 0;
        if (log_now || record_now) {
          // One collective (every rank calls) for both: the loss averaged over the ranks, and when a record is
          // due each rank's own steps/s since its last record (scripts/plot_step_rate draws them).
          const auto now = std::chrono::steady_clock::now();
          std::vector<double> slots(1 + static_cast<size_t>(pg->size()), 0.0);
          slots[0] = local_loss / pg->size();
          if (record_now) slots[1 + static_cast<size_t>(pg->rank())] = rates.per_second(now);
          slots = pg->sum(slots);
          if (log_now) progress.log(s + 1, slots[0], lr);
          if (record_now) {
            const double elapsed = std::chrono::duration<double>(now - run_start).count();
            sdk::MetricsLog::Fields fields{{"epoch", epoch}, {"step", s + 1}, {"steps_per_epoch", steps_per_epoch},
                                           {"global_step", step}, {"loss", slots[0]}, {"lr", lr},
                                           {"samples_per_s", slots[1] * static_cast<double>(global_batch)},
                                           {"time_s", elapsed}, {"time_ms", static_cast<double>(unix_ms())}};
            for (int r = 0; r < pg->size(); ++r)
              fields.emplace_back("steps_per_s_rank" + std::to_string(r), slots[1 + static_cast<size_t>(r)]);
            metrics.record("step", fields);
          }
        }
        // Every rank asks every step, so all stop after the same step (see stop_request.hpp).
        if (sdk::stop_requested_on_any_rank(*pg)) {
          double rate = 0, secs = 0;
          progress.end_epoch(rate, secs);
          checkpointer.save(*model, optimizer, epoch, s + 1, global_batch);
          if (rank0) {
            std::printf("stop requested by %s: %s after epoch %lld step %lld/%lld, exiting; run again with --resume to go on\n",
                        signal_text(sdk::stop_signal()).c_str(),
                        opts.checkpoint_dir.empty() ? "no --checkpoint-dir, nothing saved"
                                                    : ("checkpoint " + checkpointer.path() + " saved").c_str(),
                        static_cast<long long>(epoch), static_cast<long long>(s + 1),
                        static_cast<long long>(steps_per_epoch));
            std::fflush(stdout);
          }
          stopped = true;
          break;
        }
      }
      if (stopped) break;
      sdk::EpochRow row;
      row.epoch = epoch;
      progress.end_epoch(row.samples_per_s, row.seconds);
      // Per-rank BatchNorm statistics differ a little between ranks: evaluate and save rank 0's, as PyTorch
      // DDP does by broadcasting buffers.
      if (opts.norm == "batchnorm") ddp.sync_buffers();
      {
        const sdk::QuietPhase evaluating(kQuietAtMost);  // a pass over the test set: no step, no beat
        evaluate(model, test_set, *pg, loss_sum, loss_count, row);
      }
      metrics.record("epoch", {{"epoch", epoch}, {"train_loss", row.train_loss}, {"test_loss", row.test_loss},
                               {"accuracy", row.accuracy}, {"samples_per_s", row.samples_per_s},
                               {"seconds", row.seconds}});
      rows.push_back(row);
      checkpointer.save(*model, optimizer, epoch);
      done_in_epoch = 0;  // saved whole: nothing new until the next step
    }
  } catch (const std::exception& e) {
    // A collective failed: a peer is gone (its node lost, its process killed), typically as ddprun re-forms
    // the job. Agreeing on a save is impossible now, but every replica holds the state of the last completed
    // step: each surviving rank saves it alone, so the next round resumes there instead of at the last
    // epoch's checkpoint (the steps since would be lost).
    if (!opts.checkpoint_dir.empty() && done_in_epoch > 0) {
      checkpointer.save_alone(*model, optimizer, at_epoch, done_in_epoch, global_batch);
      std::printf("rank %d: the group broke (%s); checkpoint %s saved at epoch %lld step %lld\n", pg->rank(),
                  first_line(e.what()).c_str(), checkpointer.path().c_str(), static_cast<long long>(at_epoch),
                  static_cast<long long>(done_in_epoch));
      std::fflush(stdout);
    }
    if (sdk::stop_requested()) return 0;  // the teardown asked us to stop: done, cleanly
    throw;
  }
  if (rank0 && !rows.empty()) {
    std::printf("%s", sdk::format_epoch_table(rows).c_str());
    std::fflush(stdout);
  }
  return 0;  // no closing barrier needed: the SDK's setup handshakes make exiting safe (docs/SDK.md)
}

}  // namespace

int main(int argc, char** argv) {
  ex::TrainOptions opts;
  try {
    opts = ex::parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "fashion_mnist: " << e.what() << "\n" << ex::kUsage;
    return 64;  // EX_USAGE
  }
  if (opts.help) {
    std::cout << ex::kUsage;
    return 0;
  }
  sdk::SpawnOptions spawn;
  spawn.nproc = opts.nproc;
  return sdk::launch(argc, argv, spawn, [&](const sdk::WorldInfo& world) { return train(world, opts); });
}
