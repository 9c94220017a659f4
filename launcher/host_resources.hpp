// What the machine offers, for --nproc-per-node auto|cpu|gpu.
#pragma once

#include <string>

namespace ddprun::launcher {

// CPUs this process may run on (sched_getaffinity: respects taskset, cgroups' cpusets and srun's binding).
int usable_cpu_count();

// Visible CUDA devices without loading CUDA: CUDA_VISIBLE_DEVICES when set (entries up to the first
// invalid one, as the CUDA runtime reads it), else the /dev/nvidia<N> device nodes.
int visible_gpu_count(const std::string& cuda_visible_devices, bool cuda_visible_devices_set);

}  // namespace ddprun::launcher
