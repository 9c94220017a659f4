// NCCL without c10d: for a LibTorch built with CUDA but without ProcessGroupNCCL. Rank 0 creates the
// NCCL unique id and publishes it through the c10d store; every rank joins the communicator on
// cuda:LOCAL_RANK. Compiled only when CMake finds CUDA and NCCL (DDPRUN_SDK_RAW_NCCL), never on
// Debian's CPU-only LibTorch.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace ddprun::sdk {

// A c10d::ProcessGroup with allreduce (sum), broadcast and barrier over NCCL. Collectives run on the
// CUDA legacy default stream, which LibTorch uses unless a stream guard says otherwise, and complete
// before they return (the returned Work is already done).
c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int size, c10::Device device,
                                                       std::chrono::milliseconds timeout);

}  // namespace ddprun::sdk
