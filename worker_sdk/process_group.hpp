// The process group every collective of the SDK goes through: a c10d TCPStore hosted by rank 0 at
// MASTER_ADDR:MASTER_PORT, ProcessGroupGloo for CPU tensors and, when LibTorch has CUDA, NCCL for CUDA
// tensors (without Gloo's headers, NCCL alone: see worker_sdk/CMakeLists.txt). Also the small collectives a
// training loop needs: metric sums and means, barrier.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <vector>

#include "worker_sdk/c10d_backend.hpp"
#include "worker_sdk/world.hpp"

namespace gloo::transport {
class Device;
}

namespace ddprun::sdk {

struct ProcessGroupOptions {
  // Bound on every collective (a peer that never arrives fails the job instead of hanging it).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // Bound on connecting to the store and on waiting for all ranks to join it.
  std::chrono::milliseconds store_timeout{std::chrono::minutes(5)};
  int gloo_threads = 2;  // Gloo's worker threads: collectives run there, overlapping the caller
};

class ProcessGroup {
 public:
  // Joins the group described by `world` (blocks until every rank has joined or store_timeout passes).
  // Throws sdk::Error or c10::Error when the store cannot be reached.
  static std::shared_ptr<ProcessGroup> init(const WorldInfo& world, const ProcessGroupOptions& options = {});

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }  // LOCAL_WORLD_SIZE: ranks sharing this node
  // cuda:LOCAL_RANK when LibTorch has CUDA and a device is present, else CPU.
  torch::Device device() const { return device_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The Gloo transport device (network interface) this group's connections use.
  const std::shared_ptr<gloo::transport::Device>& gloo_device() const { return gloo_device_; }
  // 0, 1, 2, ... per call: a key prefix for sub-communicators built through the store, the same on every
  // rank as long as every rank builds them in the same order.
  int next_sequence() { return sequence_++; }

  // Sum over ranks, in place, started asynchronously; the backend is chosen by the tensor's device.
  c10::intrusive_ptr<c10d::Work> allreduce_async(at::Tensor& tensor);
  void allreduce(at::Tensor& tensor);
  void broadcast(at::Tensor& tensor, int root = 0);
  // Broadcasts many tensors from `root` with one collective per dtype (flattened), not one per tensor.
  void broadcast_coalesced(std::vector<at::Tensor> tensors, int root = 0);
  void barrier();

  // Metric reduction: the sum / mean over ranks of one value per rank, or of each element of a vector.
  double sum(double value);
  double mean(double value);
  std::vector<double> sum(const std::vector<double>& values);

 private:
  CollectiveBackend& backend_for(const at::Tensor& tensor);
  CollectiveBackend& any_backend();  // for barriers: Gloo, or NCCL in an SDK built without Gloo

  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  torch::Device device_{torch::kCPU};
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_{0};
  std::shared_ptr<gloo::transport::Device> gloo_device_;
  int sequence_ = 0;
  c10::intrusive_ptr<CollectiveBackend> gloo_;  // null in an SDK built without Gloo
  c10::intrusive_ptr<CollectiveBackend> nccl_;  // null without CUDA
};

}  // namespace ddprun::sdk
