"""Prints its arguments, one JSON list per rank: shows what the launcher passed."""
import json
import os
import sys

print(f"rank {os.environ['RANK']} argv {json.dumps(sys.argv[1:])}", flush=True)
