#!/usr/bin/env python3
"""A job in which one rank fails, with torch.distributed.elastic's @record on its entry point.

@record writes the exception and its traceback to the file named by TORCHELASTIC_ERROR_FILE (set by the
launcher for every worker); the launcher reads it and shows the root cause's traceback in its summary.
    ddprun --nproc-per-node 2 examples/python/record_failure.py --fail-rank 1
The other ranks wait in a collective that can never complete; the launcher tears them down.
"""
import argparse
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def load_shard(rank, fail_rank, mark):
    if rank == fail_rank:
        if mark:  # for benchmarks: when the exception was raised (wall clock, comparable across processes)
            with open(mark, "w") as f:
                f.write(repr(time.time()))
        return parse_header(b"\x00\x00\x09\x03")
    return torch.zeros(4)


def parse_header(header):
    kind = header[2]
    if kind != 0x08:
        raise ValueError(f"shard header has element type 0x{kind:02x}, expected 0x08 (unsigned byte)")
    return header


@record
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--mark", default="", help="file the failing rank writes the time of its exception to")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()  # every rank is up: the failure below is a failure of a running job
    shard = load_shard(rank, args.fail_rank, args.mark)
    dist.all_reduce(shard)  # the failed rank never joins: the others wait here until torn down
    return 0


if __name__ == "__main__":
    sys.exit(main())
