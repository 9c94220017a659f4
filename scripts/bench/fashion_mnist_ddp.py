#!/usr/bin/python3
"""The Fashion-MNIST example's model and recipe in Python DDP (torch 1.13, Debian's python3-torch): the
peer that scripts/bench/sdk_accuracy_bench.sh compares examples/fashion_mnist against on the same machine.

Same network (the seeds' CNN with BatchNorm after each convolution), same data and normalisation, same
DistributedSampler order (seed + epoch), same global batch, SGD with Nesterov momentum 0.9 and weight decay
5e-4, same one-cycle schedule per step (linear warm-up from a tenth of the peak over 15% of the steps,
cosine to zero), peak lr = lr x global batch / 256. Gloo, one thread per rank.

usage: /usr/bin/python3 scripts/bench/fashion_mnist_ddp.py [--nproc N] [--epochs N] [--batch-size N per rank]
       [--lr X] [--seed N] [--data-dir DIR]
Prints "epoch E test_loss L accuracy A%" per epoch (rank 0), like the C++ example.
"""
import argparse, gzip, math, os, socket, struct, sys, time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(dir, prefix):
    images = read_idx(f"{dir}/{prefix}-images-idx3-ubyte.gz")
    labels = read_idx(f"{dir}/{prefix}-labels-idx1-ubyte.gz")
    x = (torch.from_numpy(images.copy()).float().div_(255).sub_(MEAN).div_(STD)).unsqueeze(1)
    return x, torch.from_numpy(labels.copy()).long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.norm1 = nn.Conv2d(1, 20, 5), nn.BatchNorm2d(20)
        self.conv2, self.norm2 = nn.Conv2d(20, 50, 5), nn.BatchNorm2d(50)
        self.fc1, self.fc2 = nn.Linear(800, 500), nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.norm1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.norm2(self.conv2(x))), 2)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x.view(-1, 800)))), 1)


def learning_rate(a, global_batch, step, total):
    peak = a.lr * global_batch / 256
    warm = math.floor(a.warmup * total)
    if step < warm:
        return peak * (0.1 + 0.9 * step / warm)
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))


def worker(rank, a, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.nproc)
    torch.manual_seed(a.seed)
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "t10k")
    sampler = torch.utils.data.DistributedSampler(range(len(ytr)), a.nproc, rank, shuffle=True, seed=a.seed)
    steps_per_epoch = (len(sampler) + a.batch_size - 1) // a.batch_size
    total, global_batch, step = steps_per_epoch * a.epochs, a.batch_size * a.nproc, 0
    start = time.time()
    for epoch in range(1, a.epochs + 1):
        sampler.set_epoch(epoch)
        order = torch.tensor(list(sampler))
        model.train()
        for s in range(steps_per_epoch):
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]
            for g in opt.param_groups:
                g["lr"] = learning_rate(a, global_batch, step, total)
            opt.zero_grad()
            F.nll_loss(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
            step += 1
        model.eval()
        with torch.no_grad():
            mine = torch.arange(rank, len(yte), a.nproc)
            loss = correct = 0.0
            for i in range(0, len(mine), 1000):
                idx = mine[i:i + 1000]
                out = model(xte[idx])  # DDP's forward broadcasts rank 0's BatchNorm buffers
                loss += F.nll_loss(out, yte[idx], reduction="sum").item()
                correct += out.argmax(1).eq(yte[idx]).sum().item()
            t = torch.tensor([loss, correct, float(len(mine))], dtype=torch.float64)
            dist.all_reduce(t)
        if rank == 0:
            print(f"epoch {epoch} test_loss {t[0] / t[2]:.4f} accuracy {100 * t[1] / t[2]:.2f}% "
                  f"({time.time() - start:.1f} s)", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--warmup", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.nproc)


if __name__ == "__main__":
    main()
