"""A launch script whose --local_rank is declared in another file (launch_args.py): ddprun cannot see it."""
import launch_args

args = launch_args.parse()
print(f"local_rank {args.local_rank}", flush=True)
