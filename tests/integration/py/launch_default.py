"""A torch.distributed.launch script in pytorch/examples' manner: --local_rank with a default of 0, the
environment not read. Prints what it parsed next to LOCAL_RANK."""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)  # filled in by torch.distributed.launch
parser.add_argument("--local_world_size", type=int, default=1)
args = parser.parse_args()
print(f"rank {os.environ['RANK']} parsed local_rank {args.local_rank} LOCAL_RANK {os.environ['LOCAL_RANK']}",
      flush=True)
