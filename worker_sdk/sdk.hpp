// Everything a training program needs from the worker SDK, in one include. LibTorch's layers, losses and
// optimizers are the program's own includes (<torch/nn.h>, <torch/optim.h>): docs/SDK.md says why.
#pragma once

#include "worker_sdk/checkpoint.hpp"
#include "worker_sdk/ddp.hpp"
#include "worker_sdk/error.hpp"
#include "worker_sdk/error_file.hpp"
#include "worker_sdk/heartbeat.hpp"
#include "worker_sdk/metrics.hpp"
#include "worker_sdk/process_group.hpp"
#include "worker_sdk/progress.hpp"
#include "worker_sdk/sampler.hpp"
#include "worker_sdk/spawn.hpp"
#include "worker_sdk/stop_request.hpp"
#include "worker_sdk/sync_batch_norm.hpp"
#include "worker_sdk/world.hpp"
