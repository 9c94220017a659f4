"""Reads its stdin to the end and prints each line with its rank: shows which rank got ddprun's stdin."""
import os
import sys

rank = os.environ["RANK"]
for line in sys.stdin:
    print(f"rank {rank} read: {line.rstrip()}", flush=True)
print(f"rank {rank} eof", flush=True)
