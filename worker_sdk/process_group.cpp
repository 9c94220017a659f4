#include "worker_sdk/process_group.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>

#ifdef DDPRUN_SDK_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef DDPRUN_SDK_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef DDPRUN_SDK_RAW_NCCL
#include "worker_sdk/nccl_comm.hpp"
#endif

#include <csignal>
#include <cstdlib>

#include "common/contract/worker_contract.hpp"
#include "worker_sdk/error.hpp"
#include "worker_sdk/heartbeat.hpp"

namespace ddprun::sdk {
namespace {

#ifdef DDPRUN_SDK_GLOO
std::shared_ptr<::gloo::transport::Device> make_gloo_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  // A single-node job on loopback must not depend on how this host's name resolves.
  if (master_addr == "127.0.0.1" || master_addr == "localhost") {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  if (master_addr == "::1") return c10d::ProcessGroupGloo::createDeviceForHostname("::1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

// "[fd42::1]:29500" for an IPv6 MASTER_ADDR, as the error names it.
std::string store_where(const WorldInfo& world) {
  const bool v6 = world.master_addr.find(':') != std::string::npos;
  return (v6 ? "[" + world.master_addr + "]" : world.master_addr) + ":" + std::to_string(world.master_port);
}

}  // namespace

std::shared_ptr<ProcessGroup> ProcessGroup::init(const WorldInfo& world, const ProcessGroupOptions& options) {
  // A peer that dies mid-collective must be an error this rank can handle (save, report, exit cleanly), not a
  // silent death: Gloo's writes to a closed peer raise SIGPIPE, whose default action kills the process (ddprun
  // resets signal dispositions for its workers, as any launcher). Python ignores SIGPIPE from its start; so does
  // every SDK program once it joins a group: the write fails with EPIPE and Gloo throws.
  std::signal(SIGPIPE, SIG_IGN);
  auto pg = std::make_shared<ProcessGroup>();
  pg->rank_ = world.rank;
  pg->size_ = world.world_size;
  pg->local_size_ = world.local_world_size;

  // Where the round's store lives. ddprun (and torchrun's c10d backend) say TORCHELASTIC_USE_AGENT_STORE=False:
  // rank 0 hosts a new store at MASTER_PORT each round, so no key of an earlier round can be met. torchrun's
  // static backend says True: its agent hosts one store for every round and every rank is a client; keys
  // then need a per-round space, and the restart count is one there (static jobs restart whole, so every rank
  // agrees). Never key a fresh store on the restart count: torchrun gives a node that joined an elastic job 0
  // where the others have 1, and the ranks then waited for each other's keys until store_timeout (~5 min).
  const bool agent_store = env_or(contract::kUseAgentStore, "False") == "True";
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(world.master_port);
  store_options.isServer = world.rank == 0 && !agent_store;
  store_options.numWorkers = world.world_size;
  store_options.waitWorkers = true;
  store_options.timeout = options.store_timeout;
  c10::intrusive_ptr<c10d::Store> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(world.master_addr, store_options);
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(world.rank) + ": cannot " + (world.rank == 0 ? "host" : "reach") +
                " the c10d store at " + store_where(world) + ": " +
                e.what());
  }
  pg->store_ = c10::make_intrusive<c10d::PrefixStore>(
      agent_store ? "ddprun_sdk/" + std::to_string(world.restart_count) : std::string("ddprun_sdk"), tcp);

  pg->timeout_ = options.timeout;
#ifdef DDPRUN_SDK_GLOO
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  pg->gloo_device_ = make_gloo_device(world.master_addr);
  gloo_options->devices.push_back(pg->gloo_device_);
  gloo_options->threads = options.gloo_threads;
  pg->gloo_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("gloo", pg->store_), world.rank, world.world_size, gloo_options);
#endif

  if (torch::cuda::is_available() && world.local_rank < static_cast<int>(torch::cuda::device_count())) {
    pg->device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank));
#ifdef DDPRUN_SDK_C10D_NCCL
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = options.timeout;
    pg->nccl_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>("nccl", pg->store_), world.rank, world.world_size, nccl_options);
#elif defined(DDPRUN_SDK_RAW_NCCL)
    pg->nccl_ = make_nccl_group(c10::make_intrusive<c10d::PrefixStore>("nccl", pg->store_), world.rank,
                                world.world_size, pg->device_, options.timeout);
#endif
  }
  if (!pg->gloo_ && !pg->nccl_ && world.world_size > 1) {
    throw Error("rank " + std::to_string(world.rank) +
                ": this SDK was built without Gloo's headers (LibTorch ships none), so it reduces CUDA tensors "
                "on NCCL only, and this rank has no CUDA device (LOCAL_RANK " + std::to_string(world.local_rank) +
                "): build the SDK against a LibTorch with Gloo's headers (Debian's, with libgloo-dev)");
  }

  // Joining ends with a handshake. Without it a rank whose connections are all up could finish (and exit)
  // while a peer is still inside ProcessGroupGloo's setup, connecting its other pairs or reading their
  // addresses from the store this rank may host: Gloo records the early leaver's FIN as an error on the
  // peer's pair and the peer fails with "Connection closed by peer" (measured: 3 of 60 three-rank jobs that
  // return right after init). Once every rank is past this barrier, nobody needs another's setup.
  // DDPRUN_SDK_TEST_NO_HANDSHAKE (a test hook) leaves it out, to measure what it prevents.
  if (world.world_size > 1 && std::getenv("DDPRUN_SDK_TEST_NO_HANDSHAKE") == nullptr) {
    c10d::BarrierOptions handshake;
    handshake.timeout = options.store_timeout;
    try {
      pg->any_backend().barrier(handshake)->wait();
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(world.rank) + ": not every rank finished joining the process group: " +
                  e.what());
    }
  }
  return pg;
}

CollectiveBackend& ProcessGroup::backend_for(const at::Tensor& tensor) {
  if (tensor.device().is_cuda()) {
    DDPRUN_SDK_CHECK(nccl_, "a CUDA tensor was given but this build has no NCCL support");
    return *nccl_;
  }
  DDPRUN_SDK_CHECK(gloo_, "a CPU tensor was given but this SDK was built without Gloo's headers (LibTorch ships "
                          "none): move it to group.device() first");
  return *gloo_;
}

CollectiveBackend& ProcessGroup::any_backend() { return gloo_ ? *gloo_ : *nccl_; }

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_async(at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  return backend_for(tensor).allreduce(tensors);
}

// Each blocking collective beats once it completes (worker_sdk/heartbeat.hpp): one that never completes
// leaves the rank silent, and ddprun --hang-timeout finds it.
void ProcessGroup::allreduce(at::Tensor& tensor) {
  {
    PeerWait waiting;
    allreduce_async(tensor)->wait();
  }
  heartbeat();
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  {
    PeerWait waiting;
    backend_for(tensor).broadcast(tensors, opts)->wait();
  }
  heartbeat();
}

void ProcessGroup::broadcast_coalesced(std::vector<at::Tensor> tensors, int root) {
  // Group by (dtype, device) keeping order, flatten each group, broadcast once, copy back.
  std::vector<bool> done(tensors.size(), false);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (done[i]) continue;
    std::vector<size_t> group;
    std::vector<at::Tensor> flat_parts;
    for (size_t j = i; j < tensors.size(); ++j) {
      if (!done[j] && tensors[j].scalar_type() == tensors[i].scalar_type() &&
          tensors[j].device() == tensors[i].device()) {
        group.push_back(j);
        flat_parts.push_back(tensors[j].detach().reshape({-1}));
        done[j] = true;
      }
    }
    at::Tensor flat = at::cat(flat_parts);
    broadcast(flat, root);
    int64_t offset = 0;
    for (size_t j : group) {
      auto n = tensors[j].numel();
      at::NoGradGuard no_grad;
      tensors[j].copy_(flat.narrow(0, offset, n).view_as(tensors[j]));
      offset += n;
    }
  }
}

void ProcessGroup::barrier() {
  {
    PeerWait waiting;
    any_backend().barrier()->wait();
  }
  heartbeat();
}

std::vector<double> ProcessGroup::sum(const std::vector<double>& values) {
  if (values.empty()) return {};
  // On CPU through Gloo; an SDK without Gloo sums on this rank's CUDA device.
  at::Tensor t = torch::tensor(values, torch::kDouble);
  if (gloo_) {
    allreduce(t);
  } else {
    at::Tensor on_device = t.to(device_);
    allreduce(on_device);
    t = on_device.cpu();
  }
  auto acc = t.accessor<double, 1>();
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = acc[static_cast<int64_t>(i)];
  return out;
}

double ProcessGroup::sum(double value) { return sum(std::vector<double>{value})[0]; }

double ProcessGroup::mean(double value) { return sum(value) / size_; }

}  // namespace ddprun::sdk
