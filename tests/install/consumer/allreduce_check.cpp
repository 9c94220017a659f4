// Built against the installed ddprun package and run under the installed ddprun: each rank contributes
// rank+1 to one Gloo allreduce; every rank checks the sum, so a wrong world or a broken group fails.
#include <cstdio>

#include "worker_sdk/sdk.hpp"

namespace sdk = ddprun::sdk;

int main(int argc, char** argv) {
  sdk::SpawnOptions spawn;
  spawn.nproc = 2;  // only when not started by ddprun
  return sdk::launch(argc, argv, spawn, [](const sdk::WorldInfo& world) {
    auto pg = sdk::ProcessGroup::init(world);
    at::Tensor t = torch::full({4}, static_cast<float>(world.rank + 1));
    pg->allreduce(t);
    const float expected = static_cast<float>(world.world_size * (world.world_size + 1) / 2);
    DDPRUN_SDK_CHECK(t.eq(expected).all().item<bool>(), "allreduce gave " + std::to_string(t[0].item<float>()) +
                                                            ", expected " + std::to_string(expected));
    std::printf("rank %d of %d: allreduce sum %g ok\n", world.rank, world.world_size, static_cast<double>(expected));
    return 0;
  });
}
