// Fashion-MNIST with the worker SDK: the seeds' CNN trained data-parallel, evaluated on the test set
// with accuracy reduced across ranks, checkpointed each epoch. Runs under ddprun, or alone with --nproc.
#include <sys/stat.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

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

// Each rank evaluates every W-th test sample (no padding, so nothing is counted twice); the sums meet.
void evaluate(ex::Net& model, const Split& test, sdk::ProcessGroup& pg, int64_t epoch) {
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
  auto total = pg.sum(std::vector<double>{loss_sum, correct, static_cast<double>(mine.size(0))});
  if (pg.rank() == 0) {
    std::printf("epoch %lld test_loss %.4f accuracy %.2f%%\n", static_cast<long long>(epoch), total[0] / total[2],
                100.0 * total[1] / total[2]);
    std::fflush(stdout);
  }
}

int train(const sdk::WorldInfo& world, const ex::TrainOptions& opts) {
  if (opts.threads > 0) torch::set_num_threads(opts.threads);
  auto pg = sdk::ProcessGroup::init(world);
  torch::manual_seed(opts.seed);
  ex::Net model(opts.syncbn ? pg : nullptr);
  model->to(pg->device());  // cuda:LOCAL_RANK when this rank has a GPU: gradients then go through NCCL
  if (pg->rank() == 0) std::cout << "training on " << pg->device() << std::endl;
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(opts.lr).momentum(opts.momentum));
  sdk::Checkpointer checkpointer(opts.checkpoint_dir, pg);
  const int64_t first_epoch = checkpointer.maybe_resume(opts.resume || world.restart_count > 0, *model, optimizer);
  if (first_epoch > 1 && pg->rank() == 0) std::cout << "resumed from " << checkpointer.path() << " at epoch " << first_epoch << std::endl;
  sdk::DistributedDataParallel ddp(model.ptr(), pg);

  const Split train_set = load_split(opts.data_dir, "train");
  const Split test_set = load_split(opts.data_dir, "t10k");
  sdk::SamplerOptions sampler_options;
  sampler_options.seed = opts.seed;
  sdk::DistributedSampler sampler(train_set.labels.size(0), pg->size(), pg->rank(), sampler_options);

  int64_t step = 0;
  for (int64_t epoch = first_epoch; epoch <= opts.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    auto order = sampler.indices();
    at::Tensor order_t = torch::from_blob(order.data(), {static_cast<int64_t>(order.size())}, torch::kLong);
    const int64_t steps_per_epoch = (sampler.size() + opts.batch_size - 1) / opts.batch_size;
    model->train();
    auto t0 = std::chrono::steady_clock::now();
    int64_t samples_since = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      if (opts.max_steps > 0 && step >= opts.max_steps) break;
      at::Tensor idx = order_t.narrow(0, s * opts.batch_size, std::min<int64_t>(opts.batch_size, sampler.size() - s * opts.batch_size));
      optimizer.zero_grad();
      at::Tensor loss = torch::nll_loss(model->forward(train_set.images.index_select(0, idx).to(pg->device())),
                                        train_set.labels.index_select(0, idx).to(pg->device()));
      loss.backward();
      optimizer.step();
      ++step;
      samples_since += idx.size(0) * pg->size();
      if (step % opts.log_every == 0) {
        double mean_loss = pg->mean(loss.item<double>());  // every rank calls: a collective
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (pg->rank() == 0) {
          std::printf("train epoch %lld step %lld/%lld loss %.4f throughput %.1f samples/s\n",
                      static_cast<long long>(epoch), static_cast<long long>(s + 1),
                      static_cast<long long>(steps_per_epoch), mean_loss, samples_since / secs);
          std::fflush(stdout);
        }
        t0 = std::chrono::steady_clock::now();
        samples_since = 0;
      }
    }
    evaluate(model, test_set, *pg, epoch);
    checkpointer.save(*model, optimizer, epoch);
    if (opts.max_steps > 0 && step >= opts.max_steps) break;
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
