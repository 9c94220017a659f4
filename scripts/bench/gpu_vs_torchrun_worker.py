#!/usr/bin/env python3
"""The worker program of scripts/bench/gpu_vs_torchrun.py: the same file runs under ddprun and under torchrun.
Every rank first writes its pid to DIR/ready.RANK (the bench watches each pid's exit).

  gpu_vs_torchrun_worker.py exit DIR FAIL_RANK CODE sleep|busy
      Rank FAIL_RANK waits until WORLD_SIZE ranks are ready, writes time.time() to DIR/mark and exits CODE; the
      others sleep, or (busy) run a Python loop outside any collective, until they are killed.
  gpu_vs_torchrun_worker.py ddp DIR gloo|nccl STEPS FAIL_RANK FAIL_STEP
      A tiny DDP model (gloo on the CPU; nccl on the GPU LOCAL_RANK) trained for STEPS steps, under torch's @record
      (as torchrun's docs advise: the exception goes to TORCHELASTIC_ERROR_FILE). Rank FAIL_RANK writes time.time()
      to DIR/mark just before it raises at step FAIL_STEP (-1: nobody fails). Rank 0 writes its loop's seconds to
      DIR/train_s.
Only the standard library, and torch for ddp.
"""
import os
import sys
import time


def write_file(path, text):
    """Atomic: a reader never sees half a file."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def ready_count(folder):
    return sum(name.startswith("ready.") and not name.endswith(".tmp") for name in os.listdir(folder))


def exit_mode(folder, rank, fail_rank, code, how):
    if rank == fail_rank:
        while ready_count(folder) < int(os.environ["WORLD_SIZE"]):
            time.sleep(0.002)
        time.sleep(0.05)  # past the launchers' own start-up bookkeeping
        write_file(os.path.join(folder, "mark"), repr(time.time()))
        os._exit(code)
    while how == "busy":  # only the launcher can tell this rank that the job is over
        until = time.perf_counter() + 0.002
        while time.perf_counter() < until:
            sum(i * i for i in range(200))
        time.sleep(0.002)  # half a core each: a 2-core machine still runs the launchers
    time.sleep(3600)


def ddp_mode(folder, rank, backend, steps, fail_rank, fail_step):
    import torch
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def train():
        device = torch.device("cpu")
        if backend == "nccl":
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(1)
        dist.init_process_group(backend)
        torch.manual_seed(rank)
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
        ids = [device.index] if backend == "nccl" else None
        model = torch.nn.parallel.DistributedDataParallel(net, device_ids=ids)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(32, 64, device=device), torch.randint(0, 10, (32,), device=device)
        t0 = time.monotonic()
        for step in range(steps):
            if rank == fail_rank and step == fail_step:
                write_file(os.path.join(folder, "mark"), repr(time.time()))
                raise RuntimeError(f"planned failure of rank {rank} at step {step}")
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if backend == "nccl":
            torch.cuda.synchronize()
        if rank == 0:
            write_file(os.path.join(folder, "train_s"), repr(time.monotonic() - t0))
        dist.destroy_process_group()

    train()


if __name__ == "__main__":
    mode, folder, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    me = int(os.environ["RANK"])
    write_file(os.path.join(folder, f"ready.{me}"), str(os.getpid()))
    if mode == "exit":
        exit_mode(folder, me, int(args[0]), int(args[1]), args[2])
    else:
        ddp_mode(folder, me, args[0], int(args[1]), int(args[2]), int(args[3]))
