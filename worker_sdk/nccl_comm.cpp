#include "worker_sdk/nccl_comm.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "worker_sdk/error.hpp"

namespace ddprun::sdk {
namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) throw Error(std::string(what) + ": " + ncclGetErrorString(rc));
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: throw Error("NCCL: unsupported dtype " + std::string(c10::toString(t.scalar_type())));
  }
}

// Work that is finished when it is handed out.
class DoneWork : public c10d::Work {
 public:
  bool isCompleted() override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
};

class NcclGroup : public c10d::ProcessGroup {
 public:
  NcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, c10::Device device,
            std::chrono::milliseconds timeout)
      : c10d::ProcessGroup(rank, size), device_index_(device.index()) {
    check_cuda(cudaSetDevice(device_index_), "cudaSetDevice");
    ncclUniqueId id;
    if (rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store->set("nccl_unique_id", std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id),
                                                        reinterpret_cast<uint8_t*>(&id) + sizeof id));
    }
    store->wait({"nccl_unique_id"}, timeout);
    auto bytes = store->get("nccl_unique_id");
    DDPRUN_SDK_CHECK(bytes.size() == sizeof id, "NCCL: malformed unique id in the store");
    std::memcpy(&id, bytes.data(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
  }
  ~NcclGroup() override { ncclCommDestroy(comm_); }

  const std::string getBackendName() const override { return "ddprun_nccl"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions&) override {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (auto& t : tensors) {
      check_nccl(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), ncclSum,
                               comm_, nullptr),
                 "ncclAllReduce");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    return finish();
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (auto& t : tensors) {
      check_nccl(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t),
                               static_cast<int>(opts.rootRank), comm_, nullptr),
                 "ncclBroadcast");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    return finish();
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    std::vector<at::Tensor> one{at::zeros({1}, at::TensorOptions().device(c10::kCUDA, device_index_))};
    return allreduce(one, c10d::AllreduceOptions());
  }

 private:
  c10::intrusive_ptr<c10d::Work> finish() {
    check_cuda(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    return c10::make_intrusive<DoneWork>();
  }

  c10::DeviceIndex device_index_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int size, c10::Device device,
                                                       std::chrono::milliseconds timeout) {
  return c10::make_intrusive<NcclGroup>(store, rank, size, device, timeout);
}

}  // namespace ddprun::sdk
