"""Rank 1 stops at a breakpoint(); the other ranks wait to be stopped. Without a terminal on its stdin,
pdb reads end of file at its prompt and quits: bdb.BdbQuit."""
import os
import time

if int(os.environ["RANK"]) == 1:
    breakpoint()
    print("rank 1 went on past its breakpoint")
time.sleep(60)
