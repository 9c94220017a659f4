// In-process tests of the worker SDK (world info, sampler, checkpoints, error file, DDP's checks), and
// the test binary's main: "sdk_test --role NAME DIR" runs as one rank of a multi-rank test instead.
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#define DOCTEST_CONFIG_IMPLEMENT
#include "tests/worker_sdk/doctest_torch.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "tests/worker_sdk/test_support.hpp"
#include "worker_sdk/sdk.hpp"

namespace sdk = ddprun::sdk;
using sdk::test::TempDir;

TEST_SUITE("world") {
  TEST_CASE("a missing variable is named in the error") {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
      ::setenv(v, "0", 1);
    }
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("LOCAL_WORLD_SIZE", "2", 1);
    ::setenv("MASTER_PORT", "29500", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    auto w = sdk::WorldInfo::from_env();
    CHECK(w.world_size == 2);
    CHECK(w.master_port == 29500);
    ::unsetenv("LOCAL_RANK");
    CHECK_THROWS_WITH_AS(sdk::WorldInfo::from_env(), doctest::Contains("LOCAL_RANK is not set"), sdk::Error);
    ::setenv("LOCAL_RANK", "0", 1);
    ::setenv("RANK", "5", 1);
    CHECK_THROWS_WITH_AS(sdk::WorldInfo::from_env(), doctest::Contains("RANK=5 is not below WORLD_SIZE=2"), sdk::Error);
    ::setenv("RANK", "x", 1);
    CHECK_THROWS_WITH_AS(sdk::WorldInfo::from_env(), doctest::Contains("RANK='x'"), sdk::Error);
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
      ::unsetenv(v);
    }
    CHECK_THROWS_WITH_AS(sdk::WorldInfo::from_env(), doctest::Contains("start it with ddprun"), sdk::Error);
  }
}

TEST_SUITE("sampler") {
  TEST_CASE("every index is covered and every rank gets the same count, for sizes not divisible by W") {
    for (int64_t n : {0, 1, 7, 10, 11, 64, 101}) {
      for (int w : {1, 2, 3, 4}) {
        for (bool drop_last : {false, true}) {
          std::vector<int64_t> all;
          std::set<int64_t> distinct;
          int64_t count = -1;
          for (int r = 0; r < w; ++r) {
            sdk::DistributedSampler s(n, w, r, {true, 7, drop_last});
            auto idx = s.indices();
            CHECK(static_cast<int64_t>(idx.size()) == s.size());
            if (count >= 0) CHECK(s.size() == count);
            count = s.size();
            all.insert(all.end(), idx.begin(), idx.end());
          }
          distinct.insert(all.begin(), all.end());
          for (auto i : all) CHECK((i >= 0 && i < n));
          if (drop_last) {
            CHECK(count == n / w);  // PyTorch: ceil((n - w) / w) == floor(n / w) when n % w != 0
            CHECK(distinct.size() == all.size());  // disjoint
          } else {
            CHECK(count == (n + w - 1) / w);
            CHECK(static_cast<int64_t>(distinct.size()) == n);  // full coverage, padding repeats the head
          }
        }
      }
    }
  }

  TEST_CASE("set_epoch reshuffles, the same seed and epoch give the same order") {
    sdk::DistributedSampler a(1000, 2, 0, {true, 3, false});
    sdk::DistributedSampler b(1000, 2, 0, {true, 3, false});
    a.set_epoch(1);
    b.set_epoch(1);
    CHECK(a.indices() == b.indices());
    b.set_epoch(2);
    CHECK(a.indices() != b.indices());
    sdk::DistributedSampler c(1000, 2, 0, {true, 4, false});
    c.set_epoch(1);
    CHECK(a.indices() != c.indices());
    sdk::DistributedSampler plain(10, 3, 1, {false, 0, false});
    CHECK(plain.indices() == std::vector<int64_t>{1, 4, 7, 0});
  }

  TEST_CASE("matches PyTorch's DistributedSampler index for index") {
    std::string out;
    int rc = sdk::test::run_program(
        {"/usr/bin/python3", "-c",
         "import torch.utils.data as d\n"
         "for r in range(3): print(list(d.DistributedSampler(range(53), num_replicas=3, rank=r, seed=11).__iter__()))\n"
         "s=d.DistributedSampler(range(53), num_replicas=3, rank=1, seed=11, drop_last=True); s.set_epoch(4)\n"
         "print(list(iter(s)))"},
        {}, out);
    if (rc != 0) {
      MESSAGE("python3 with torch unavailable, skipped: " << out);
      return;
    }
    std::string mine;
    auto fmt = [](const std::vector<int64_t>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]\n";
    };
    for (int r = 0; r < 3; ++r) mine += fmt(sdk::DistributedSampler(53, 3, r, {true, 11, false}).indices());
    sdk::DistributedSampler s(53, 3, 1, {true, 11, true});
    s.set_epoch(4);
    mine += fmt(s.indices());
    CHECK(out == mine);
  }
}

TEST_SUITE("checkpoint") {
  TEST_CASE("round trip restores model, optimizer state and epoch") {
    TempDir dir;
    torch::manual_seed(0);
    torch::nn::Linear a(4, 3);
    torch::optim::SGD opt_a(a->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    a->forward(torch::randn({5, 4})).sum().backward();
    opt_a.step();
    sdk::save_checkpoint(dir / "c.pt", *a, opt_a, 7);
    torch::nn::Linear b(4, 3);
    torch::optim::SGD opt_b(b->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto epoch = sdk::load_checkpoint(dir / "c.pt", *b, opt_b);
    REQUIRE(epoch.has_value());
    CHECK(*epoch == 7);
    CHECK(torch::equal(a->weight, b->weight));
    // The momentum buffers came back: the same next step from the same gradient.
    opt_a.zero_grad();
    for (auto* m : {&a, &b}) (*m)->forward(torch::ones({1, 4})).sum().backward();
    opt_a.step();
    opt_b.step();
    CHECK(torch::equal(a->weight, b->weight));
    CHECK_FALSE(sdk::load_checkpoint(dir / "absent.pt", *b, opt_b).has_value());
  }
}

TEST_SUITE("error_file") {
  TEST_CASE("an escaping exception becomes torchelastic's JSON and exit code 1") {
    TempDir dir;
    ::setenv("TORCHELASTIC_ERROR_FILE", (dir / "err.json").c_str(), 1);
    int rc = sdk::run_main([]() -> int { throw std::runtime_error("disk \"full\"\nreally"); });
    ::unsetenv("TORCHELASTIC_ERROR_FILE");
    CHECK(rc == 1);
    std::string json = sdk::test::read_text(dir / "err.json");
    CHECK(json.rfind("{\"message\": {\"message\": \"std::runtime_error: disk \\\"full\\\"\\nreally\", "
                     "\"extraInfo\": {\"py_callstack\": \"main",
                     0) == 0);
    CHECK(json.find("\"timestamp\": \"1") != std::string::npos);
  }

  TEST_CASE("an sdk::Error carries the raising file and line") {
    try {
      DDPRUN_SDK_CHECK(1 + 1 == 3, "arithmetic broke");
    } catch (...) {
      auto r = sdk::describe_exception(std::current_exception());
      CHECK(r.type == "ddprun::sdk::Error");
      CHECK(r.message == "arithmetic broke");
      CHECK(r.where.find("sdk_unit_test.cpp:") != std::string::npos);
    }
  }
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--role") {
    return sdk::run_main([&] { return sdk::test::run_role_from_argv(argc, argv); });
  }
  doctest::Context context(argc, argv);
  return context.run();
}
