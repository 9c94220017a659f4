#!/usr/bin/env python3
"""Data-parallel training of a small CNN on Fashion-MNIST, written as a torchrun user writes it.

Runs unchanged under torchrun and under ddprun:
    ddprun   --nproc-per-node 2 examples/python/fashion_mnist_ddp.py --max-steps 200
    torchrun --nproc-per-node 2 examples/python/fashion_mnist_ddp.py --max-steps 200

The patterns it shows:
  - env:// initialisation: init_process_group("gloo") reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE
    from the environment the launcher sets; LOCAL_RANK (also from the environment) picks the device.
  - a DistributedSampler with set_epoch(), so every rank sees its own shard, reshuffled each epoch.
  - rank 0 alone writes the checkpoint, atomically (a temporary file renamed over the old one), so a crash
    in the middle of a save never leaves a half-written checkpoint.
  - on a restart (--max-restarts N; TORCHELASTIC_RESTART_COUNT > 0) every rank resumes from that checkpoint.
The data is read straight from the Debian package dataset-fashion-mnist (gzipped IDX files): nothing is
downloaded.
"""
import argparse
import gzip
import itertools
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # of the Fashion-MNIST training images, scaled to [0, 1]


def read_idx(path, limit=0):
    """An IDX file (gzipped) as a uint8 tensor of the shape its header gives; only the first `limit` items
    when limit > 0 (the rest of the file is not even decompressed)."""
    with gzip.open(path, "rb") as f:
        zero, dtype, ndim = struct.unpack(">HBB", f.read(4))
        if zero != 0 or dtype != 0x08:
            raise ValueError(f"{path}: not an IDX file of unsigned bytes")
        shape = list(struct.unpack(f">{ndim}I", f.read(4 * ndim)))
        if limit:
            shape[0] = min(shape[0], limit)
        count = 1
        for n in shape:
            count *= n
        data = f.read(count)
    if len(data) != count:
        raise ValueError(f"{path}: truncated ({len(data)} of {count} bytes)")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(shape)


def load_split(data_dir, split, limit):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), limit)
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), limit)
    return TensorDataset(images, labels.long())


def to_input(images):
    return images.float().div_(255).sub_(MEAN).div_(STD).unsqueeze_(1)


class Net(nn.Module):
    """conv 1->20 5x5, max-pool, conv 20->50 5x5, max-pool, fc 800->500, fc 500->10 (the C++ example's)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def save_checkpoint(path, model, optimizer, epoch, step_in_epoch, step, global_batch):
    """Rank 0 only. Written to a temporary file in the same directory, then renamed: atomic on POSIX."""
    tmp = f"{path}.tmp.{os.getpid()}"
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
             "step_in_epoch": step_in_epoch, "step": step, "global_batch": global_batch}
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the gzipped IDX files")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--train-limit", type=int, default=0, help="use only the first N training images (0: all)")
    p.add_argument("--checkpoint", default="", help="checkpoint file (empty: none)")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--eval", action="store_true", help="rank 0 reports accuracy on the test set at the end")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (ranks share the cores)")
    # For demonstrating restarts: the last rank raises once, in the first attempt, at this step.
    p.add_argument("--crash-at-step", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    local_rank = int(os.environ["LOCAL_RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")  # env://
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    epoch, skip, step = 0, 0, 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, skip, step = state["epoch"], state["step_in_epoch"], state["step"]
        # An elastic job may resume with another world size: the place in the epoch carries over in samples
        # (DistributedSampler deals the shuffled order out strided, so the first k global batches are the
        # first k * global_batch samples whatever the world size).
        saved_batch = state.get("global_batch", args.batch_size * world)
        skip = skip * saved_batch // (args.batch_size * world)
        print(f"rank {rank}: resumed from {args.checkpoint} at step {step} (restart {restart}, world size "
              f"{world})", flush=True)
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters to every rank

    train = load_split(args.data, "train", args.train_limit)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    t0 = time.monotonic()
    loss = torch.zeros(())
    done = False
    while epoch < args.epochs and not done:
        sampler.set_epoch(epoch)  # the same shuffle on every rank, a different one each epoch
        for i, (images, labels) in enumerate(itertools.islice(loader, skip, None), start=skip):
            if args.crash_at_step and step == args.crash_at_step and restart == 0 and rank == world - 1:
                raise RuntimeError(f"rank {rank}: crash requested at step {step}")
            optimizer.zero_grad()
            loss = F.nll_loss(ddp(to_input(images).to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0 and step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if rank == 0 and args.checkpoint and step % args.checkpoint_every == 0:
                save_checkpoint(args.checkpoint, model, optimizer, epoch, i + 1, step, args.batch_size * world)
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        else:
            epoch, skip = epoch + 1, 0
    elapsed = time.monotonic() - t0
    print(f"rank {rank}: finished at step {step}, loss {loss.item():.4f}, {elapsed:.2f} s", flush=True)

    if args.eval and rank == 0:
        test = load_split(args.data, "t10k", 0)
        model.eval()
        with torch.no_grad():
            pred = model(to_input(test.tensors[0]).to(device)).argmax(1)
        accuracy = (pred.cpu() == test.tensors[1]).float().mean().item()
        print(f"test accuracy {accuracy:.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
