// The C++ twin of ../shared/peers/py_ddp_bench.py, for side-by-side benchmarks: the same models,
// synthetic data, SGD(lr 0.01, momentum 0.5), gloo, one thread per rank, 10 warm-up steps, then
// "rank R/W: X steps/s". Usage: ddp_bench WORLD STEPS (env MODEL=mlp for the MLP, BATCH=N, default 64;
// DDP_BUCKET_MB / DDP_FIRST_BUCKET_MB / DDP_SEGMENT_MB, DDP_NO_BUSY_POLL / DDP_BUSY_POLL, DDP_VIA_PROCESS_GROUP undo
// design choices for comparison; BENCH_PHASES prints forward/backward/step times; BENCH_DEVICE=cuda trains on
// cuda:LOCAL_RANK, gradients through NCCL). WORLD 1 trains without DDP, as the Python peer does.
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/fashion_mnist/net.hpp"
#include "worker_sdk/sdk.hpp"

namespace sdk = ddprun::sdk;
namespace ex = ddprun::examples;

namespace {

template <typename Model>
double run(Model model, int steps, int batch, torch::Device device) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));
  at::Tensor x = torch::randn({batch, 1, 28, 28}).to(device);
  at::Tensor y = torch::randint(0, 10, {batch}, torch::kLong).to(device);
  // CUDA kernels run asynchronously: the clock is read only when the device has caught up.
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  std::chrono::steady_clock::time_point t0;
  using C = std::chrono::steady_clock;
  double tf = 0, tb = 0, ts = 0;
  for (int i = 0; i < steps + 10; ++i) {
    if (i == 10) { sync(); t0 = std::chrono::steady_clock::now(); tf = tb = ts = 0; }
    auto a = C::now();
    opt.zero_grad();
    auto loss = torch::nll_loss(model->forward(x), y);
    auto b = C::now();
    loss.backward();
    auto c = C::now();
    opt.step();
    auto d = C::now();
    tf += std::chrono::duration<double>(b - a).count();
    tb += std::chrono::duration<double>(c - b).count();
    ts += std::chrono::duration<double>(d - c).count();
  }
  sync();
  if (std::getenv("BENCH_PHASES")) std::fprintf(stderr, "phases ms/step: fwd %.2f bwd %.2f step %.2f\n", 1e3 * tf / steps, 1e3 * tb / steps, 1e3 * ts / steps);
  return steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int bench(const sdk::WorldInfo& world, int steps) {
  torch::set_num_threads(1);
  auto pg = sdk::ProcessGroup::init(world);
  torch::manual_seed(static_cast<uint64_t>(world.rank));
  const int batch = std::atoi(sdk::env_or("BATCH", "64").c_str());
  sdk::DdpOptions options;
  if (const char* mb = std::getenv("DDP_FIRST_BUCKET_MB")) options.first_bucket_cap_bytes = static_cast<size_t>(std::atof(mb) * (1 << 20));
  if (const char* mb = std::getenv("DDP_SEGMENT_MB")) options.segment_bytes = static_cast<size_t>(std::atof(mb) * (1 << 20));
  if (std::getenv("DDP_NO_BUSY_POLL")) options.busy_poll_last_bucket = sdk::DdpOptions::BusyPoll::kNever;
  if (std::getenv("DDP_BUSY_POLL")) options.busy_poll_last_bucket = sdk::DdpOptions::BusyPoll::kAlways;
  if (std::getenv("DDP_VIA_PROCESS_GROUP")) options.direct_gloo = false;
  if (const char* mb = std::getenv("DDP_BUCKET_MB")) options.bucket_cap_bytes = static_cast<size_t>(std::atof(mb) * (1 << 20));
  const bool cuda = sdk::env_or("BENCH_DEVICE", "cpu") == "cuda";
  DDPRUN_SDK_CHECK(!cuda || pg->device().is_cuda(), "BENCH_DEVICE=cuda but no CUDA device for this rank");
  const torch::Device device = cuda ? pg->device() : torch::Device(torch::kCPU);
  double rate;
  auto go = [&](auto model) {
    model->to(device);
    std::unique_ptr<sdk::DistributedDataParallel> ddp;  // alive while training: its hooks reduce gradients
    if (world.world_size > 1) ddp = std::make_unique<sdk::DistributedDataParallel>(model.ptr(), pg, options);
    return run(model, steps, batch, device);
  };
  rate = sdk::env_or("MODEL", "") == "mlp" ? go(ex::Mlp()) : go(ex::Net());
  // The format scripts/bench/sdk_ddp_bench.py parses (the Python peer's), with the step time and device after.
  std::printf("rank %d/%d: %.2f steps/s (%.3f ms/step on %s)\n", world.rank, world.world_size, rate, 1e3 / rate,
              device.str().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: ddp_bench WORLD STEPS\n");
    return 64;
  }
  sdk::SpawnOptions spawn;
  spawn.nproc = std::atoi(argv[1]);
  const int steps = std::atoi(argv[2]);
  return sdk::launch(argc, argv, spawn, [&](const sdk::WorldInfo& w) { return bench(w, steps); });
}
