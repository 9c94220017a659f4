#include "worker_sdk/nccl_raw.hpp"

#include <cstring>
#include <thread>

#include "worker_sdk/error.hpp"

namespace ddprun::sdk::nccl {
namespace {

constexpr char kTag[8] = {'d', 'd', 'p', 'n', 'c', 'c', 'l', '1'};
constexpr std::size_t kEncodedSize = sizeof kTag + 4 + sizeof(ncclUniqueId);

void check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    throw Error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(rc));
  }
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(rc));
}

}  // namespace

int library_version() {
  int code = 0;
  check(ncclGetVersion(&code), "ncclGetVersion");
  return code;
}

std::string version_string(int code) {
  // NCCL 2.9+ encodes major*10000 + minor*100 + patch; older releases major*1000 + minor*100 + patch.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int rest = code >= 10000 ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

std::vector<std::uint8_t> encode_unique_id(const ncclUniqueId& id, int version) {
  std::vector<std::uint8_t> out(kEncodedSize);
  std::memcpy(out.data(), kTag, sizeof kTag);
  for (int i = 0; i < 4; ++i) {
    out[sizeof kTag + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(static_cast<unsigned>(version) >> (8 * i));
  }
  std::memcpy(out.data() + sizeof kTag + 4, &id, sizeof id);
  return out;
}

ncclUniqueId decode_unique_id(const std::vector<std::uint8_t>& bytes, int version) {
  if (bytes.size() != kEncodedSize || std::memcmp(bytes.data(), kTag, sizeof kTag) != 0) {
    throw Error("NCCL: the unique id in the store is malformed (" + std::to_string(bytes.size()) +
                " bytes; expected " + std::to_string(kEncodedSize) + " from another rank of this SDK)");
  }
  unsigned theirs = 0;
  for (int i = 0; i < 4; ++i) theirs |= unsigned{bytes[sizeof kTag + static_cast<std::size_t>(i)]} << (8 * i);
  if (static_cast<int>(theirs) != version) {
    throw Error("NCCL: rank 0 uses NCCL " + version_string(static_cast<int>(theirs)) + " but this rank uses " +
                version_string(version) + "; every rank must load the same libnccl");
  }
  ncclUniqueId id;
  std::memcpy(&id, bytes.data() + sizeof kTag + 4, sizeof id);
  return id;
}

ncclUniqueId exchange_unique_id(const Rendezvous& store, int rank, const std::string& key) {
  if (rank == 0) {
    ncclUniqueId id;
    check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store.set(key, encode_unique_id(id));
  }
  // Rank 0 reads its own id back too: one code path, and a store that mangles bytes fails everywhere.
  return decode_unique_id(store.get(key));
}

Communicator::Communicator(const Rendezvous& store, int rank, int size, int device,
                           std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), device_(device), timeout_(timeout) {
  check_cuda(cudaSetDevice(device_), ("cudaSetDevice(" + std::to_string(device_) + ")").c_str());
  const ncclUniqueId id = exchange_unique_id(store, rank);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  // Non-blocking: ncclCommInitRank itself would wait forever for a rank that never comes.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  check(ncclCommInitRankConfig(&comm_, size, id, rank, &config), "ncclCommInitRankConfig");
  wait_ready("ncclCommInitRankConfig");
#else
  check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
#endif
}

Communicator::~Communicator() {
  if (comm_ == nullptr) return;
  // Every collective was waited for, so closing cannot cut a peer's exchange short. A non-blocking
  // communicator is finalised (flushing NCCL's proxy work) before it is destroyed, within the timeout;
  // one that cannot finish in time is aborted rather than waited for.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  ncclResult_t state = ncclCommFinalize(comm_);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
  }
  if (state != ncclSuccess) {
    ncclCommAbort(comm_);
    return;
  }
#endif
  if (ncclCommDestroy(comm_) != ncclSuccess) ncclCommAbort(comm_);
}

void Communicator::allreduce_sum(void* data, std::size_t count, ncclDataType_t type, cudaStream_t stream) {
  if (comm_ == nullptr) throw Error("NCCL: the communicator was aborted after an earlier error");
  check(ncclAllReduce(data, data, count, type, ncclSum, comm_, stream), "ncclAllReduce");
  wait_ready("ncclAllReduce");
  wait(stream, "ncclAllReduce");
}

void Communicator::broadcast(void* data, std::size_t count, ncclDataType_t type, int root, cudaStream_t stream) {
  if (comm_ == nullptr) throw Error("NCCL: the communicator was aborted after an earlier error");
  check(ncclBroadcast(data, data, count, type, root, comm_, stream), "ncclBroadcast");
  wait_ready("ncclBroadcast");
  wait(stream, "ncclBroadcast");
}

// A non-blocking communicator may still be enqueuing (ncclInProgress) when a call returns; only after
// that is the stream worth querying.
void Communicator::wait_ready(const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) abort_and_throw(std::string(what) + ": " + ncclGetErrorString(state));
    if (std::chrono::steady_clock::now() > deadline) abort_and_throw(std::string(what) + ": timed out");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void Communicator::wait(cudaStream_t stream, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) abort_and_throw(std::string(what) + ": " + cudaGetErrorString(q));
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) {
      abort_and_throw(std::string(what) + ": " + ncclGetErrorString(state));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      abort_and_throw(std::string(what) + ": not finished after " + std::to_string(timeout_.count()) +
                      " ms (a peer is gone or stuck)");
    }
    // Short collectives finish within microseconds: poll fast first, then back off to 200 us.
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(200)) pause *= 2;
  }
}

void Communicator::abort_and_throw(const std::string& message) {
  ncclCommAbort(comm_);  // frees the communicator and unblocks its kernels; it is unusable afterwards
  comm_ = nullptr;
  throw Error("NCCL rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + message);
}

}  // namespace ddprun::sdk::nccl
