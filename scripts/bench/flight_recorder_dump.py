#!/usr/bin/env python3
"""How long PyTorch's NCCL Flight Recorder takes to dump, on a GPU machine (one GPU, world 1): the figure that
sizes ddprun's wait for the dumps in a hang's capture (agent/stack_capture.cpp, README "Hang detection").

For each symbolizer setting (TORCH_SYMBOLIZE_MODE unset, fast, dladdr) a fresh process runs N all_reduces on NCCL
and then measures:
  - the FIFO path ddprun uses, twice (the process's first dump, then a second): one byte written to
    TORCH_NCCL_DEBUG_INFO_PIPE_FILE + rank + ".pipe", then the time until TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank
    exists and has stopped growing for 0.2 s (the monitor reads once a second with TORCH_NCCL_DUMP_ON_TIMEOUT=1,
    so up to 1 s of it is the wait for the read, and 0.2 s the check that it stopped);
  - in process, after those: torch._C._distributed_c10d._dump_nccl_trace() with and without stack traces
    (median of 3).

    python3 scripts/bench/flight_recorder_dump.py [--collectives 200] [--repeat 2]
Prints one line per setting. Needs torch with CUDA and NCCL, and a GPU."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ["", "fast", "dladdr"]


def child(collectives):
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    t = torch.ones(1024, device="cuda")
    for _ in range(collectives):
        dist.all_reduce(t)
    torch.cuda.synchronize()

    pipe = os.environ["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"] + "0.pipe"
    dump = os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] + "0"

    def through_fifo():
        # What ddprun does: one byte to the FIFO, then wait until the dump exists and has stopped growing.
        if os.path.exists(dump):
            os.unlink(dump)
        t0 = time.monotonic()
        fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"x")
        os.close(fd)
        size, stable_since = -1, None
        while time.monotonic() - t0 < 60:
            now = os.path.getsize(dump) if os.path.exists(dump) else -1
            if now > 0 and now == size:
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since > 0.2:
                    break
            else:
                stable_since = None
            size = now
            time.sleep(0.01)
        return (stable_since or time.monotonic()) - t0, size

    def in_process(**kw):
        t0 = time.monotonic()
        c10d._dump_nccl_trace(**kw)
        return time.monotonic() - t0

    cold, size = through_fifo()  # the process's first dump: what a hang's capture meets
    warm, _ = through_fifo()
    with_stacks = statistics.median(in_process(includeCollectives=True, includeStackTraces=True, onlyActive=False)
                                    for _ in range(3))
    without = statistics.median(in_process(includeCollectives=True, includeStackTraces=False, onlyActive=False)
                                for _ in range(3))
    print(f"RESULT FIFO to dump: first {cold * 1000:.0f} ms, second {warm * 1000:.0f} ms ({size} bytes); "
          f"in process after those: with stacks {with_stacks * 1000:.0f} ms, without {without * 1000:.0f} ms",
          flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collectives", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each setting, one process each")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        return child(args.collectives)
    for mode in [m for _ in range(args.repeat) for m in MODES]:
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1",
                       LOCAL_RANK="0", TORCH_NCCL_TRACE_BUFFER_SIZE="2000", TORCH_NCCL_DUMP_ON_TIMEOUT="1",
                       TORCH_NCCL_DEBUG_INFO_PIPE_FILE=f"{d}/trace_", TORCH_NCCL_DEBUG_INFO_TEMP_FILE=f"{d}/trace_")
            env.pop("TORCH_SYMBOLIZE_MODE", None)
            if mode:
                env["TORCH_SYMBOLIZE_MODE"] = mode
            r = subprocess.run([sys.executable, __file__, "--child", "--collectives", str(args.collectives)], env=env,
                               capture_output=True, text=True, timeout=300)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
            print(f"TORCH_SYMBOLIZE_MODE={mode or '(unset)'}, {args.collectives} all_reduces: "
                  f"{line[0][7:] if line else 'no result, exit %d: %s' % (r.returncode, r.stderr[-400:])}", flush=True)


if __name__ == "__main__":
    main()
