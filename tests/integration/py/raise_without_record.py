"""A script that fails the plain way, with no torchelastic @record and so no error file: rank 1 raises three
calls deep and Python prints the traceback on stderr; every other rank waits to be stopped. With --argparse
it instead requires an option it is not given, and argparse exits 2 with its usage error."""
import argparse
import os
import sys
import time


def read_shard(name):
    raise RuntimeError(f"cannot read {name}: header is truncated")


def load(epoch):
    read_shard(f"shard-{epoch}")


def main():
    if "--argparse" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--argparse", action="store_true")
        parser.add_argument("--lr", required=True)
        parser.parse_args()
    if int(os.environ["RANK"]) == 1:
        load(7)
    time.sleep(60)


main()
