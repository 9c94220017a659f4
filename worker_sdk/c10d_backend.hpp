// The c10d class the SDK issues collectives on. ProcessGroupGloo and ProcessGroupNCCL derive from
// c10d::ProcessGroup in LibTorch 1.x and from c10d::Backend since 2.0 (where ProcessGroup became a
// dispatcher over backends), so the SDK names whichever this LibTorch has: Debian's 1.13 and the 2.x
// LibTorch that ships with PyTorch wheels both build.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>

namespace ddprun::sdk {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

}  // namespace ddprun::sdk
