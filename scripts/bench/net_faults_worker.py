#!/usr/bin/python3
"""The training that scripts/bench/network_faults.py runs under ddprun and under torchrun alike: Python DDP
(torch.nn.parallel.DistributedDataParallel, gloo, one thread) of the Fashion-MNIST example's CNN on Debian's
Fashion-MNIST, batches of 32 per rank, for --seconds of rank 0's clock from its first step (the stop flag rides
in an all_reduce, so every rank stops after the same step). After its first step each rank creates
--ready/ready.RANK; at the end rank 0 prints "trained N steps". Needs only the launcher's environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: env://)."""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_ddp import Net, load  # noqa: E402 (the same model and data as the SDK comparison)

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=40)
p.add_argument("--ready", required=True)
p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
args = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
x, y = load(args.data_dir, "train")
model = DistributedDataParallel(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
start, step = None, 0
while True:
    i = ((step * world + rank) * 32) % (len(x) - 32)
    opt.zero_grad()
    F.nll_loss(model(x[i:i + 32]), y[i:i + 32]).backward()
    opt.step()
    if start is None:
        start = time.monotonic()
        open(os.path.join(args.ready, f"ready.{rank}"), "w").close()
    step += 1
    stop = torch.tensor([1.0 if rank == 0 and time.monotonic() - start > args.seconds else 0.0])
    dist.all_reduce(stop)
    if stop.item() > 0:
        break
if rank == 0:
    print(f"trained {step} steps", flush=True)
dist.destroy_process_group()
