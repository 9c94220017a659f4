// NCCL without LibTorch: the unique-id exchange through a key-value store and a communicator with
// bounded waits. nccl_comm.cpp wraps it as a c10d::ProcessGroup for LibTorch builds with CUDA but no
// ProcessGroupNCCL; keeping this part free of LibTorch lets CI compile, link and unit-test the NCCL path
// on any machine with the CUDA toolkit (target ddprun_sdk_nccl, test sdk_nccl), GPU or not.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddprun::sdk::nccl {

// NCCL_VERSION_CODE of the libnccl loaded at run time (which may differ from the header's).
int library_version();
// "2.28.9" for 22809 (and "2.9.6" for the old 2906 scheme).
std::string version_string(int code);

// What rank 0 publishes: a tag, the NCCL version code and the 128-byte id. The version travels with the
// id because ranks on different NCCL versions fail or hang inside ncclCommInitRank; here they get an
// error naming both versions instead.
std::vector<std::uint8_t> encode_unique_id(const ncclUniqueId& id, int version = library_version());
// Throws sdk::Error on bytes that are not an encoded id, or an id from another NCCL version.
ncclUniqueId decode_unique_id(const std::vector<std::uint8_t>& bytes, int version = library_version());

// How the ranks meet (the c10d store in the SDK): `set` publishes, `get` waits (bounded) for a key.
struct Rendezvous {
  std::function<void(const std::string& key, const std::vector<std::uint8_t>& value)> set;
  std::function<std::vector<std::uint8_t>(const std::string& key)> get;
};

// Rank 0 creates an id and publishes it under `key`; every rank returns the published id.
ncclUniqueId exchange_unique_id(const Rendezvous& store, int rank, const std::string& key = "nccl_unique_id");

// One NCCL communicator on one CUDA device. Every wait is bounded by `timeout`: a peer that never
// joins or never reaches a collective makes the call abort the communicator and throw, instead of
// blocking forever the way ncclCommInitRank and cudaStreamSynchronize do.
class Communicator {
 public:
  Communicator(const Rendezvous& store, int rank, int size, int device, std::chrono::milliseconds timeout);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // In place on `stream`; these return once the operation has completed on the device.
  void allreduce_sum(void* data, std::size_t count, ncclDataType_t type, cudaStream_t stream);
  void broadcast(void* data, std::size_t count, ncclDataType_t type, int root, cudaStream_t stream);

 private:
  // Polls (without holding a core at 100%) until `stream` is idle, NCCL reports an error, or the
  // timeout passes; the last two abort the communicator and throw.
  void wait(cudaStream_t stream, const char* what);
  // Waits for a non-blocking NCCL call (init) to leave ncclInProgress, bounded by the timeout.
  void wait_ready(const char* what);
  [[noreturn]] void abort_and_throw(const std::string& message);

  int rank_, size_, device_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace ddprun::sdk::nccl
