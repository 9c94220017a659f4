#!/usr/bin/env python3
"""Launch of 8 x /bin/true, two ddprun builds and the floor side by side: the three commands interleaved round by
round (a shared machine's load hits all three alike), medians and ratios to the floor (`xargs -P8`, forking the
same 8 processes in parallel). For a before/after of a change to the start path (issue 35).

usage: scripts/bench/launch_ab.py BEFORE_DDPRUN AFTER_DDPRUN [ROUNDS]      (default 40 rounds)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    with tempfile.TemporaryDirectory(prefix="ddprun_launch_ab_") as tmp:
        eight = os.path.join(tmp, "eight")
        with open(eight, "w") as f:
            f.write("x\n" * 8)
        env = dict(os.environ, TMPDIR=tmp)
        job = ["-q", "--standalone", "--nproc-per-node", "8", "/bin/true"]
        cmds = {"before": [sys.argv[1], *job], "after": [sys.argv[2], *job],
                "floor (xargs -P8)": ["xargs", "-P8", "-n1", "-a", eight, "/bin/true"]}
        times = {name: [] for name in cmds}
        loads = []
        for _ in range(rounds):
            for name, cmd in cmds.items():
                t0 = time.perf_counter()
                subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
                times[name].append((time.perf_counter() - t0) * 1e3)
            loads.append(os.getloadavg()[0])
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load "
          f"{statistics.median(loads):.1f} ({min(loads):.1f}-{max(loads):.1f}), {rounds} rounds")
    floor = statistics.median(times["floor (xargs -P8)"])
    for name, t in times.items():
        m = statistics.median(t)
        print(f"{name:18s} median {m:6.1f} ms ({min(t):.1f}-{max(t):.1f})  {m / floor:.2f}x the floor")


if __name__ == "__main__":
    main()
