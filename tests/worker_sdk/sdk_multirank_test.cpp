// Multi-rank tests: real processes (this binary re-executed through the SDK's embedded spawn), real
// sockets on 127.0.0.1, real Gloo. Each SDK_TEST_ROLE runs inside every rank; the TEST_CASE beside it
// starts the ranks and checks what they left in the shared directory.
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>

#include "tests/worker_sdk/doctest_torch.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "examples/fashion_mnist/net.hpp"
#include "tests/worker_sdk/test_support.hpp"
#include "worker_sdk/sdk.hpp"

namespace sdk = ddprun::sdk;
namespace ex = ddprun::examples;
using sdk::test::kCpuCollectives;
using sdk::test::TempDir;

#define ROLE_CHECK(cond) DDPRUN_SDK_CHECK(cond, "role check failed: " #cond)

namespace {

constexpr int kWorld = 2, kBatch = 8, kSteps = 3;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The data of the DDP equivalence test: the same on every process (seeded), kSteps*micro*world*kBatch rows.
std::pair<at::Tensor, at::Tensor> equivalence_data(int micro, int world) {
  torch::manual_seed(1234);
  int64_t rows = int64_t{kSteps} * micro * world * kBatch;
  return {torch::randn({rows, 1, 28, 28}), torch::randint(0, 10, {rows}, torch::kLong)};
}

}  // namespace

SDK_TEST_ROLE("ddp_equivalence") {
  torch::set_num_threads(1);
  auto world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  const int micro = env_int("SDK_TEST_MICRO", 1);
  torch::manual_seed(static_cast<uint64_t>(world.rank));  // different inits: construction must broadcast rank 0's
  ex::Net model;
  sdk::DdpOptions options;
  options.first_bucket_cap_bytes = options.bucket_cap_bytes = 64 << 10;  // several buckets
  options.direct_gloo = env_int("SDK_TEST_VIA_PG", 0) == 0;
  options.segment_bytes = 16 << 10;  // several segments per bucket on the direct path
  sdk::DistributedDataParallel ddp(model.ptr(), pg, options);
  ROLE_CHECK(ddp.bucket_layout().size() >= 3);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  auto [x, y] = equivalence_data(micro, world.world_size);
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      int64_t first = (int64_t{step} * micro + m) * world.world_size * kBatch + int64_t{world.rank} * kBatch;
      auto run = [&] {
        torch::nll_loss(model->forward(x.narrow(0, first, kBatch)), y.narrow(0, first, kBatch)).backward();
      };
      if (m + 1 < micro) {
        auto guard = ddp.no_sync();
        run();
      } else {
        run();
      }
    }
    opt.step();
  }
  torch::save(model->parameters(), dir + "/params-" + std::to_string(world.rank) + ".pt");
  // Metric reduction and barrier on the same group.
  const double w = world.world_size;
  ROLE_CHECK(pg->sum(world.rank + 1.0) == w * (w + 1) / 2);
  ROLE_CHECK(pg->mean(world.rank + 1.0) == (w + 1) / 2);
  ROLE_CHECK((pg->sum(std::vector<double>{1, double(world.rank)}) == std::vector<double>{w, w * (w - 1) / 2}));
  pg->barrier();
  return 0;
}

TEST_SUITE("ddp" * doctest::skip(!kCpuCollectives)) {
  TEST_CASE("W ranks x batch b end where one process with batch W*b ends, identical across ranks") {
    // {gradient accumulation micro-steps, through the process group instead of the direct ring, ranks}:
    // 2 ranks use the direct path's AllreduceRing, 3 its AllreduceRingChunked.
    struct Config {
      int micro, via_pg, world;
    };
    for (Config config : {Config{1, 0, 2}, Config{2, 0, 2}, Config{2, 1, 2}, Config{1, 0, 3}}) {
      const int micro = config.micro, via_pg = config.via_pg, world = config.world;
      CAPTURE(micro);
      CAPTURE(via_pg);
      CAPTURE(world);
      TempDir dir;
      REQUIRE(sdk::test::run_ranks("ddp_equivalence", world, dir.path(),
                                   {{"SDK_TEST_MICRO", std::to_string(micro)},
                                    {"SDK_TEST_VIA_PG", std::to_string(via_pg)}}) == 0);
      torch::manual_seed(0);
      ex::Net reference;
      torch::optim::SGD opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
      auto [x, y] = equivalence_data(micro, world);
      for (int step = 0; step < kSteps; ++step) {
        opt.zero_grad();
        for (int m = 0; m < micro; ++m) {
          int64_t first = (int64_t{step} * micro + m) * world * kBatch;
          torch::nll_loss(reference->forward(x.narrow(0, first, world * kBatch)),
                          y.narrow(0, first, world * kBatch)).backward();
        }
        opt.step();
      }
      std::vector<at::Tensor> p0, p1;
      torch::load(p0, dir / "params-0.pt");
      torch::load(p1, dir / ("params-" + std::to_string(world - 1) + ".pt"));
      auto ref = reference->parameters();
      REQUIRE(p0.size() == ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        CAPTURE(i);
        CHECK(torch::equal(p0[i], p1[i]));  // bitwise identical replicas
        CHECK(torch::allclose(p0[i], ref[i], /*rtol=*/1e-5, /*atol=*/1e-6));
        CHECK_FALSE(torch::equal(p0[i], torch::zeros_like(p0[i])));
      }
    }
  }
}

namespace {
struct TwoHeads : torch::nn::Module {
  torch::nn::Linear used{register_module("used", torch::nn::Linear(4, 2))};
  torch::nn::Linear idle{register_module("idle", torch::nn::Linear(4, 2))};
};
}  // namespace

// Two separate jobs rather than an error and a second DDP in one process. No barrier at the end: ranks may
// return right after their last collective (the "shutdown" suite checks that).
// Under ddprun --hang-timeout (tests/worker_sdk/CMakeLists.txt, sdk_hang_ddprun*): three DDP steps, which beat
// by themselves, then rank 0 skips an allreduce and idles: rank 1's allreduce never completes, both fall silent.
// With SDK_TEST_AUTO_BEATS_ONLY=1 no heartbeat(step) is called: only the SDK's own beats make it detectable.
// torchrun gives a node that joined an elastic job TORCHELASTIC_RESTART_COUNT=0 where the others have 1: the
// ranks of one round must still meet in their store (keys once carried the count: they waited ~5 min).
SDK_TEST_ROLE("disagreeing_restart_counts") {
  torch::set_num_threads(1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", sdk::env_or("RANK", "0") == "0" ? "1" : "0", 1);
  auto world = sdk::WorldInfo::from_env();
  sdk::ProcessGroupOptions options;
  options.store_timeout = std::chrono::seconds(20);
  auto pg = sdk::ProcessGroup::init(world, options);
  at::Tensor t = torch::full({4}, world.rank + 1.0);
  pg->allreduce(t);
  ROLE_CHECK(t[0].item<double>() == world.world_size * (world.world_size + 1) / 2.0);
  return 0;
}

TEST_CASE("ranks whose restart counts disagree (a joiner under torchrun) still form their round" *
          doctest::test_suite("ddp") * doctest::skip(!kCpuCollectives)) {
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(sdk::test::run_ranks("disagreeing_restart_counts", 2, dir.path()) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));  // not the store timeout
}

// Rank 1 is silent for 2.5 s (3x ddprun's --hang-timeout 1 in tests/worker_sdk/CMakeLists.txt) inside a quiet
// phase of at most 4 s, then joins the allreduce: no hang. SDK_TEST_QUIET_OVERRUN=1: the phase says at most
// 1.5 s, and the silence is found once it ends.
SDK_TEST_ROLE("quiet_phase") {
  torch::set_num_threads(1);
  auto world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  const bool overrun = sdk::env_or("SDK_TEST_QUIET_OVERRUN", "") == "1";
  if (world.rank == 1) {
    const sdk::QuietPhase evaluating(overrun ? std::chrono::milliseconds(1500) : std::chrono::milliseconds(4000));
    std::this_thread::sleep_for(overrun ? std::chrono::seconds(30) : std::chrono::milliseconds(2500));
  } else {
    const sdk::QuietPhase waiting(std::chrono::seconds(overrun ? 60 : 4));  // rank 0 waits in the allreduce
    at::Tensor t = torch::ones({2});
    pg->allreduce(t);
    ROLE_CHECK(t[0].item<double>() == 2.0);
    return 0;
  }
  at::Tensor t = torch::ones({2});
  pg->allreduce(t);
  return 0;
}

// A rank's exit takes 3 s with no beat (3x ddprun's --hang-timeout 1), as a process group's teardown, LibTorch's
// static destructors or a sanitizer's leak check can: the SDK's exit quiet phase (kExitQuiet) covers it, the job
// ends 0. The slow handler is registered before the first beat, so it runs after the SDK's (atexit: last in,
// first out).
SDK_TEST_ROLE("slow_exit") {
  std::atexit([] { std::this_thread::sleep_for(std::chrono::seconds(3)); });
  torch::set_num_threads(1);
  auto world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  at::Tensor t = torch::ones({2});
  pg->allreduce(t);
  ROLE_CHECK(t[0].item<double>() == world.world_size);
  return 0;
}

// DDP steps in lockstep, rank 1's own work (its forward) 50% longer: ddprun names it by the work the SDK counts
// between its waits for the other ranks (sdk::PeerWait), without any call from the program. ~20 s of steps.
SDK_TEST_ROLE("straggler") {
  torch::set_num_threads(1);
  const sdk::WorldInfo world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
  sdk::DistributedDataParallel ddp(model, pg);
  const auto work = std::chrono::milliseconds(world.rank == 1 ? 90 : 60);
  for (int step = 0; step < 220; ++step) {
    std::this_thread::sleep_for(work);
    model->forward(torch::ones({3, 4})).sum().backward();
    sdk::heartbeat(step);
  }
  return 0;
}

SDK_TEST_ROLE("skip_allreduce") {
  const bool auto_only = env_int("SDK_TEST_AUTO_BEATS_ONLY", 0) == 1;
  const sdk::WorldInfo world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
  sdk::DistributedDataParallel ddp(model, pg);
  for (int step = 0; step < 3; ++step) {
    model->forward(torch::ones({3, 4})).sum().backward();
    if (!auto_only) sdk::heartbeat(step);
  }
  if (world.rank == 0) {
    ::pause();  // alive and silent: the allreduce below is never joined
    return 0;
  }
  at::Tensor t = torch::ones({4});
  pg->allreduce(t);
  return 0;
}

SDK_TEST_ROLE("unused_parameters_error") {
  auto pg = sdk::ProcessGroup::init(sdk::WorldInfo::from_env());
  auto model = std::make_shared<TwoHeads>();
  sdk::DistributedDataParallel ddp(model, pg);
  std::string message;
  try {
    model->used->forward(torch::ones({3, 4})).sum().backward();
  } catch (const std::exception& e) {
    message = e.what();
  }
  ROLE_CHECK(message.find("idle.weight") != std::string::npos);
  ROLE_CHECK(message.find("expect_unused_parameters") != std::string::npos);
  return 0;
}

SDK_TEST_ROLE("unused_parameters_expected") {
  auto pg = sdk::ProcessGroup::init(sdk::WorldInfo::from_env());
  auto model = std::make_shared<TwoHeads>();
  sdk::DdpOptions options;
  options.expect_unused_parameters = true;
  sdk::DistributedDataParallel ddp(model, pg, options);
  model->used->forward(torch::ones({3, 4})).sum().backward();
  ROLE_CHECK(torch::equal(model->idle->weight.grad(), torch::zeros({2, 4})));
  ROLE_CHECK(torch::equal(model->used->bias.grad(), torch::full({2}, 3.0)));
  return 0;
}

TEST_CASE("a parameter without gradient is a clear error unless expected" * doctest::test_suite("ddp") *
          doctest::skip(!kCpuCollectives)) {
  TempDir dir;
  CHECK(sdk::test::run_ranks("unused_parameters_error", 2, dir.path()) == 0);
  CHECK(sdk::test::run_ranks("unused_parameters_expected", 2, dir.path()) == 0);
}

SDK_TEST_ROLE("syncbn") {
  auto world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  torch::manual_seed(5);
  at::Tensor x_all = torch::randn({kWorld * 4, 3, 5, 5}) * 2 + 1;
  at::Tensor r_all = torch::randn({kWorld * 4, 3, 5, 5});
  sdk::SyncBatchNorm bn(3, pg);
  {
    torch::NoGradGuard no_grad;
    bn->weight.copy_(torch::tensor({0.5, 1.5, 2.0}));
    bn->bias.copy_(torch::tensor({0.1, -0.2, 0.3}));
  }
  at::Tensor x = x_all.narrow(0, world.rank * 4, 4).clone().requires_grad_();
  at::Tensor y = bn->forward(x);
  (y * r_all.narrow(0, world.rank * 4, 4)).sum().backward();
  at::Tensor gw = bn->weight.grad().clone(), gb = bn->bias.grad().clone();
  pg->allreduce(gw);  // DDP would average these; their sum is the concatenated batch's gradient
  pg->allreduce(gb);
  torch::save(std::vector<at::Tensor>{y.detach(), x.grad(), gw, gb, bn->running_mean, bn->running_var},
              dir + "/syncbn-" + std::to_string(world.rank) + ".pt");
  return 0;
}

TEST_CASE("SyncBatchNorm equals BatchNorm on the concatenated batch, forward and gradients" *
          doctest::test_suite("syncbn") * doctest::skip(!kCpuCollectives)) {
  TempDir dir;
  REQUIRE(sdk::test::run_ranks("syncbn", kWorld, dir.path()) == 0);
  torch::manual_seed(5);
  at::Tensor x = (torch::randn({kWorld * 4, 3, 5, 5}) * 2 + 1).requires_grad_();
  at::Tensor r = torch::randn({kWorld * 4, 3, 5, 5});
  at::Tensor w = torch::tensor({0.5, 1.5, 2.0}).requires_grad_(), b = torch::tensor({0.1, -0.2, 0.3}).requires_grad_();
  at::Tensor rm = torch::zeros({3}), rv = torch::ones({3});
  at::Tensor y = torch::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, false);
  (y * r).sum().backward();
  for (int rank = 0; rank < kWorld; ++rank) {
    CAPTURE(rank);
    std::vector<at::Tensor> got;
    torch::load(got, dir / ("syncbn-" + std::to_string(rank) + ".pt"));
    CHECK(torch::allclose(got[0], y.detach().narrow(0, rank * 4, 4), 1e-5, 1e-5));
    CHECK(torch::allclose(got[1], x.grad().narrow(0, rank * 4, 4), 1e-4, 1e-5));
    CHECK(torch::allclose(got[2], w.grad(), 1e-4, 1e-5));
    CHECK(torch::allclose(got[3], b.grad(), 1e-4, 1e-5));
    CHECK(torch::allclose(got[4], rm, 1e-5, 1e-6));
    CHECK(torch::allclose(got[5], rv, 1e-5, 1e-6));
  }
}

SDK_TEST_ROLE("checkpoint_save") {
  torch::manual_seed(static_cast<uint64_t>(env_int("SDK_TEST_EPOCH", 0)));
  torch::nn::Linear model(64, 64);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  sdk::save_checkpoint(dir + "/checkpoint.pt", *model, opt, env_int("SDK_TEST_EPOCH", 0));
  return 0;
}

TEST_CASE("a save killed before its rename leaves the previous checkpoint loadable" * doctest::test_suite("checkpoint")) {
  TempDir dir;
  std::string self = "/proc/self/exe", out;
  auto save = [&](int epoch, bool kill) {
    std::map<std::string, std::string> env{{"SDK_TEST_EPOCH", std::to_string(epoch)}};
    if (kill) env["DDPRUN_SDK_TEST_KILL_BEFORE_RENAME"] = "1";
    return sdk::test::run_program({self, "--role", "checkpoint_save", dir.path()}, env, out);
  };
  auto load = [&] {
    torch::nn::Linear model(64, 64);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    return sdk::load_checkpoint(dir / "checkpoint.pt", *model, opt).value_or(-1);
  };
  REQUIRE(save(1, false) == 0);
  CHECK(load() == 1);
  CHECK(save(2, true) == 128 + SIGKILL);  // died with a complete temp file, before the rename
  CHECK(load() == 1);
  CHECK(save(3, false) == 0);  // a later save replaces the stale temp file
  CHECK(load() == 3);
}

// A rank that returns right after its last collective, with no barrier: its exit must never fail its peers.
// SDK_TEST_LAST picks how the program ends: "allreduce" (through the process group: Gloo's event loop reads
// the sockets), "ddp" (a backward through DDP's direct ring: synchronous pairs), "init" (no collective at
// all after joining) or "ddp_ctor" (DDP built, never used: its ring is connected through rank 0's store).
SDK_TEST_ROLE("exit_after_collective") {
  torch::set_num_threads(1);
  auto world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  const std::string last = sdk::env_or("SDK_TEST_LAST", "allreduce");
  if (last == "ddp" || last == "ddp_ctor") {
    auto model = std::make_shared<TwoHeads>();
    sdk::DistributedDataParallel ddp(model, pg);
    if (last == "ddp") {
      (model->used->forward(torch::ones({3, 4})).sum() + model->idle->forward(torch::ones({3, 4})).sum()).backward();
      ROLE_CHECK(torch::equal(model->used->bias.grad(), torch::full({2}, 3.0)));
    }
  }
  if (last == "allreduce") {
    at::Tensor t = torch::full({1000}, world.rank + 1.0);
    pg->allreduce(t);
    ROLE_CHECK(t[999].item<double>() == world.world_size * (world.world_size + 1) / 2.0);
  }
  return 0;
}

TEST_SUITE("shutdown" * doctest::skip(!kCpuCollectives)) {
  TEST_CASE("ranks that exit right after their last collective never fail each other") {
    // SDK_TEST_SHUTDOWN_RUNS raises the count for a soak; SDK_TEST_SHUTDOWN_KINDS narrows the kinds.
    const int runs = env_int("SDK_TEST_SHUTDOWN_RUNS", 8);
    const std::string kinds = sdk::env_or("SDK_TEST_SHUTDOWN_KINDS", "allreduce:2 ddp:2 init:3 ddp_ctor:2 ddp_ctor:3");
    std::istringstream in(kinds);
    for (std::string kind; in >> kind;) {
      const std::string last = kind.substr(0, kind.find(':'));
      const int world = std::stoi(kind.substr(kind.find(':') + 1));
      CAPTURE(kind);
      int failures = 0;
      for (int i = 0; i < runs; ++i) {
        TempDir dir;
        if (sdk::test::run_ranks("exit_after_collective", world, dir.path(), {{"SDK_TEST_LAST", last}}) != 0) ++failures;
      }
      CHECK(failures == 0);
      MESSAGE(kind << ": " << runs << " runs, " << failures << " failed");
    }
  }
}

// CUDA tensors go through NCCL (c10d's ProcessGroupNCCL, or the SDK's own group when built with
// DDPRUN_SDK_FORCE_RAW_NCCL): one rank per GPU, at most two. Without CUDA the case only says so.
SDK_TEST_ROLE("cuda_collectives") {
  auto world = sdk::WorldInfo::from_env();
  auto pg = sdk::ProcessGroup::init(world);
  ROLE_CHECK(pg->device().is_cuda());
  const double w = world.world_size;
  at::Tensor t = torch::full({1 << 20}, world.rank + 1.0, torch::TensorOptions().device(pg->device()));
  pg->allreduce(t);
  ROLE_CHECK(t.cpu()[12345].item<double>() == w * (w + 1) / 2);
  at::Tensor b = torch::full({7}, world.rank + 10.0, torch::TensorOptions().device(pg->device()).dtype(torch::kLong));
  pg->broadcast(b, 0);
  ROLE_CHECK(torch::equal(b.cpu(), torch::full({7}, 10, torch::kLong)));
  // DDP on a CUDA model: gradients averaged through NCCL, replicas identical.
  torch::manual_seed(static_cast<uint64_t>(world.rank));
  ex::Net model;
  model->to(pg->device());
  sdk::DistributedDataParallel ddp(model.ptr(), pg);
  torch::optim::SGD opt(model->parameters(), 0.1);
  torch::manual_seed(100 + static_cast<uint64_t>(world.rank));
  at::Tensor x = torch::randn({8, 1, 28, 28}).to(pg->device());
  at::Tensor y = torch::randint(0, 10, {8}, torch::kLong).to(pg->device());
  opt.zero_grad();
  torch::nll_loss(model->forward(x), y).backward();
  opt.step();
  at::Tensor first = model->parameters()[0].detach().clone();
  pg->broadcast(first, 0);
  ROLE_CHECK(torch::equal(first, model->parameters()[0].detach()));
  return 0;
}

TEST_CASE("CUDA tensors are reduced and broadcast through NCCL" * doctest::test_suite("cuda")) {
  if (!torch::cuda::is_available()) {
    MESSAGE("no CUDA device here: nothing to check");
    return;
  }
  TempDir dir;
  const int world = std::min<int>(2, static_cast<int>(torch::cuda::device_count()));
  CHECK(sdk::test::run_ranks("cuda_collectives", world, dir.path()) == 0);
}
