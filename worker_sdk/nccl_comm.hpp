// NCCL without c10d: for a LibTorch built with CUDA but without ProcessGroupNCCL (or configured with
// -DDDPRUN_SDK_FORCE_RAW_NCCL=ON). Rank 0 creates the NCCL unique id and publishes it through the c10d
// store; every rank joins the communicator on cuda:LOCAL_RANK. The NCCL work itself is in nccl_raw.hpp,
// which has no LibTorch in it. Compiled only when CMake finds CUDA and NCCL (DDPRUN_SDK_RAW_NCCL), never
// into Debian's CPU-only LibTorch build (there, only nccl_raw.cpp is compiled and tested).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "worker_sdk/c10d_backend.hpp"

namespace ddprun::sdk {

// A c10d backend with allreduce (sum), broadcast and barrier over NCCL. Collectives run on each
// tensor's current LibTorch stream and complete before they return (the returned Work is already done);
// a peer that never arrives makes them throw after `timeout` instead of blocking forever.
c10::intrusive_ptr<CollectiveBackend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int size, c10::Device device,
                                                       std::chrono::milliseconds timeout);

}  // namespace ddprun::sdk
