#!/usr/bin/env python3
"""A script written for torch.distributed.launch: the launcher passes --local_rank=N on the command line
(argparse, required), and the script does not read LOCAL_RANK from the environment.

torch.distributed.launch (torch 1.x) appended --local_rank=N unless --use_env was given; torch 2.x's
launch appends --local-rank=N. ddprun-launch (ddprun under launch's behaviour) does the same, so launch's line
runs with it as its first word:
    python -m torch.distributed.launch --nnodes=1 --nproc_per_node=2 examples/python/launch_style.py
    ddprun-launch --nnodes=1 --nproc_per_node=2 examples/python/launch_style.py
(ddprun, as torchrun, passes nothing: `--local-rank-arg underscore|dash` passes it there too.)
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_rank", type=int, required=True)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    # env:// still needs MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, which every launcher sets.
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.zeros(())
    for _ in range(args.steps):
        t = torch.tensor(float(rank + 1))
        dist.all_reduce(t)
        total += t
    expected = args.steps * world * (world + 1) / 2
    env_local_rank = os.environ.get("LOCAL_RANK")
    print(f"rank {rank}: --local_rank={args.local_rank} LOCAL_RANK={env_local_rank} "
          f"all_reduce total {total.item():.0f} (expected {expected:.0f})", flush=True)
    dist.destroy_process_group()
    return 0 if total.item() == expected else 1


if __name__ == "__main__":
    sys.exit(main())
