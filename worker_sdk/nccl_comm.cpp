#include "worker_sdk/nccl_comm.hpp"

#include <c10/cuda/CUDAStream.h>

#include "worker_sdk/error.hpp"
#include "worker_sdk/nccl_raw.hpp"

namespace ddprun::sdk {
namespace {

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

nccl::Rendezvous through(const c10::intrusive_ptr<c10d::Store>& store, std::chrono::milliseconds timeout) {
  return {[store](const std::string& key, const std::vector<std::uint8_t>& value) { store->set(key, value); },
          [store, timeout](const std::string& key) {
            store->wait({key}, timeout);
            return store->get(key);
          }};
}

// The stream LibTorch would run this tensor's kernels on, so the collective is ordered after them.
cudaStream_t stream_of(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

class NcclGroup : public CollectiveBackend {
 public:
  NcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, c10::Device device,
            std::chrono::milliseconds timeout)
      : CollectiveBackend(rank, size),
        device_index_(device.index()),
        comm_(through(store, timeout), rank, size, device.index(), timeout) {}

  const std::string getBackendName() const override { return "ddprun_nccl"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions&) override {
    for (auto& t : tensors) {
      comm_.allreduce_sum(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), stream_of(t));
    }
    return c10::make_intrusive<DoneWork>();
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    for (auto& t : tensors) {
      comm_.broadcast(t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t), static_cast<int>(opts.rootRank),
                      stream_of(t));
    }
    return c10::make_intrusive<DoneWork>();
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    std::vector<at::Tensor> one{at::zeros({1}, at::TensorOptions().device(c10::kCUDA, device_index_))};
    return allreduce(one, c10d::AllreduceOptions());
  }

 private:
  c10::DeviceIndex device_index_;
  nccl::Communicator comm_;
};

}  // namespace

c10::intrusive_ptr<CollectiveBackend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int size, c10::Device device,
                                                       std::chrono::milliseconds timeout) {
  return c10::make_intrusive<NcclGroup>(store, rank, size, device, timeout);
}

}  // namespace ddprun::sdk
