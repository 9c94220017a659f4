"""A gloo DDP-like training loop for the straggler tests: each step this rank's own work (a small matmul and a
sleep of --step-ms, --slow-factor times longer on --slow-rank), wrapped in ddprun_heartbeat.work(); then an
all_reduce every rank waits in (so ranks step in lockstep, as in DDP); then a beat. Ranks stop together after
--seconds, or once --stop-file exists (rank 0 looks; the flag travels in the step's all_reduce)."""
import argparse
import os
import time

import torch
import torch.distributed as dist

import ddprun_heartbeat

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=60)
p.add_argument("--step-ms", type=float, default=100)
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow-factor", type=float, default=1.5)
p.add_argument("--stop-file", default="")
args = p.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
pause = args.step_ms / 1000 * (args.slow_factor if rank == args.slow_rank else 1.0)
weights = torch.randn(256, 256)
start = time.monotonic()
step = 0
while True:
    with ddprun_heartbeat.work():
        activations = torch.randn(64, 256) @ weights  # a little real compute
        time.sleep(pause)
    stop = rank == 0 and (time.monotonic() - start > args.seconds or
                          (args.stop_file and os.path.exists(args.stop_file)))
    grads = torch.cat([activations.mean(0), torch.tensor([1.0 if stop else 0.0])])
    dist.all_reduce(grads)
    ddprun_heartbeat.beat(step)
    step += 1
    if grads[-1].item() > 0:
        break
print(f"rank {rank} stopped after {step} steps", flush=True)
dist.destroy_process_group()
