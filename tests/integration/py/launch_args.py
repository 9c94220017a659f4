"""The argument parser of launch_imported_parser.py, in a module of its own: --local_rank is required."""
import argparse


def parse():
    parser = argparse.ArgumentParser(prog="launch_imported_parser.py")
    parser.add_argument("--local_rank", type=int, required=True)
    return parser.parse_args()
