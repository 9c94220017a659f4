// The SDK's raw NCCL path (worker_sdk/nccl_raw.hpp), without LibTorch: built and run wherever a CUDA
// toolkit with NCCL is installed. Without a GPU it checks the loaded library, the unique-id encoding
// and its exchange through a store, and that a communicator fails fast and clearly; with a GPU it also
// reduces and broadcasts through a one-rank communicator.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "worker_sdk/error.hpp"
#include "worker_sdk/nccl_raw.hpp"

namespace nccl = ddprun::sdk::nccl;

namespace {

// An in-process stand-in for the c10d store: get blocks until the key is set.
class MemoryStore {
 public:
  nccl::Rendezvous rendezvous() {
    return {[this](const std::string& key, const std::vector<std::uint8_t>& value) {
              std::lock_guard<std::mutex> lock(mutex_);
              values_[key] = value;
              set_.notify_all();
            },
            [this](const std::string& key) {
              std::unique_lock<std::mutex> lock(mutex_);
              if (!set_.wait_for(lock, std::chrono::seconds(10), [&] { return values_.count(key) > 0; })) {
                throw ddprun::sdk::Error("store: no key " + key);
              }
              return values_[key];
            }};
  }
  std::map<std::string, std::vector<std::uint8_t>> values() {
    std::lock_guard<std::mutex> lock(mutex_);
    return values_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable set_;
  std::map<std::string, std::vector<std::uint8_t>> values_;
};

bool same(const ncclUniqueId& a, const ncclUniqueId& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace

TEST_CASE("the loaded libnccl reports a version of the NCCL 2 series") {
  const int loaded = nccl::library_version();
  MESSAGE("libnccl " << nccl::version_string(loaded) << " loaded; nccl.h " << nccl::version_string(NCCL_VERSION_CODE));
  CHECK(loaded >= NCCL_VERSION(2, 0, 0));
  CHECK(nccl::version_string(NCCL_VERSION_CODE) ==
        std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH));
  CHECK(nccl::version_string(2804) == "2.8.4");  // the encoding NCCL used up to 2.8
}

TEST_CASE("a unique id survives encoding; damaged bytes and another NCCL version are named errors") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);  // needs no GPU: a bootstrap address and a random magic
  auto bytes = nccl::encode_unique_id(id);
  CHECK(same(nccl::decode_unique_id(bytes), id));

  auto shorter = bytes;
  shorter.pop_back();
  CHECK_THROWS_WITH_AS(nccl::decode_unique_id(shorter), doctest::Contains("malformed"), ddprun::sdk::Error);
  auto retagged = bytes;
  retagged[0] ^= 0xff;
  CHECK_THROWS_WITH_AS(nccl::decode_unique_id(retagged), doctest::Contains("malformed"), ddprun::sdk::Error);

  const auto other = nccl::encode_unique_id(id, NCCL_VERSION(2, 18, 1));
  CHECK_THROWS_WITH_AS(nccl::decode_unique_id(other, NCCL_VERSION(2, 28, 9)),
                       doctest::Contains("rank 0 uses NCCL 2.18.1 but this rank uses 2.28.9"), ddprun::sdk::Error);
}

TEST_CASE("every rank gets rank 0's id through the store, whoever asks first") {
  MemoryStore store;
  constexpr int kRanks = 4;
  std::vector<ncclUniqueId> got(kRanks);
  std::vector<std::thread> ranks;
  // The others start first and wait for rank 0's key, as they do when rank 0 is slow to start.
  for (int r = kRanks - 1; r >= 0; --r) {
    ranks.emplace_back([&, r] { got[static_cast<size_t>(r)] = nccl::exchange_unique_id(store.rendezvous(), r); });
  }
  for (auto& t : ranks) t.join();
  for (int r = 1; r < kRanks; ++r) CHECK(same(got[static_cast<size_t>(r)], got[0]));
  auto values = store.values();
  REQUIRE(values.count("nccl_unique_id") == 1);
  CHECK(same(nccl::decode_unique_id(values["nccl_unique_id"]), got[0]));
}

TEST_CASE("a one-rank communicator reduces and broadcasts on a GPU, or fails at once without one") {
  MemoryStore store;
  if (gpu_count() == 0) {
    // No GPU (or no driver): a clear error from the first CUDA call, not a hang in NCCL.
    CHECK_THROWS_WITH_AS(nccl::Communicator(store.rendezvous(), 0, 1, 0, std::chrono::seconds(5)),
                         doctest::Contains("cudaSetDevice(0)"), ddprun::sdk::Error);
    return;
  }
  nccl::Communicator comm(store.rendezvous(), 0, 1, 0, std::chrono::seconds(30));
  const std::vector<float> host{1, 2, 3, 4};
  float* device = nullptr;
  REQUIRE(cudaMalloc(&device, host.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  comm.allreduce_sum(device, host.size(), ncclFloat32, nullptr);
  comm.broadcast(device, host.size(), ncclFloat32, 0, nullptr);
  std::vector<float> back(host.size());
  REQUIRE(cudaMemcpy(back.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(device);
  CHECK(back == host);  // the sum over one rank is the value itself
}
