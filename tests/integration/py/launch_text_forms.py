"""A script whose text declares --local_rank where no parser of the command line reads it, in forms that fooled
a reading of the text (issue 54): a chained sub-parser declaration of a mode not chosen, the call inside a
string, a helper nobody calls. torchrun runs it; ddprun, as torchrun, passes it nothing."""
import argparse
import os

USAGE = 'parser.add_argument("--local_rank", type=int)  # what launch scripts did'


def unused_helper(p):
    p.add_argument("--local_rank", type=int, required=True)


def main():
    parser = argparse.ArgumentParser()
    modes = parser.add_subparsers(dest="mode")
    modes.add_parser("legacy").add_argument("--local_rank", type=int, required=True)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    print(f"mode {args.mode} steps {args.steps} LOCAL_RANK {os.environ['LOCAL_RANK']}", flush=True)


if __name__ == "__main__":
    main()
