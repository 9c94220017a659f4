"""A command-line tool with sub-commands whose `train` sub-parser declares --local_rank (issue 34): argparse reads
that option only after the sub-command's name, so a launcher that appends --local_rank=N makes the main parser
exit 2. ddprun passes nothing; the script reads LOCAL_RANK."""
import argparse
import os


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train")
    train.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    print(f"{args.command} local_rank {args.local_rank} LOCAL_RANK {os.environ['LOCAL_RANK']}", flush=True)


if __name__ == "__main__":
    main()
