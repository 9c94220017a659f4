#!/usr/bin/python3
"""Straggler naming: how soon a slow rank is named, and how often a balanced job is named by mistake.

Each run: ddprun --nproc-per-node 3 (default rule: 5 s samples, --straggler-window 20, --straggler-threshold 30)
on tests/integration/py/gloo_steps.py, three real gloo ranks in lockstep (Debian's python3-torch), each step a
small matmul and a 100 ms pause inside ddprun_heartbeat.work(), then an all_reduce.
  slow runs:     rank 2's pause is --slow-factor (1.5) times longer; the delay is from the first worker's start
                 (the events file's 'started') to the 'straggler' event; a run that names another rank, or none
                 within --slow-seconds, is a miss.
  balanced runs: no slow rank, --balanced-minutes each; any 'straggler' event is a false report.

  stragglers.py [--slow-runs 5] [--balanced-runs 2] [--balanced-minutes 3] [--build BUILD]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "tests", "integration", "py", "gloo_steps.py")


def run(build, tmp, seconds, slow_rank, slow_factor):
    events = os.path.join(tmp, f"events.{time.monotonic_ns()}.jsonl")
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3",
               PYTHONPATH=os.path.join(ROOT, "python") + ":" + os.environ.get("PYTHONPATH", ""))
    cmd = [os.path.join(build, "launcher", "ddprun"), "--nproc-per-node", "3", "--events-file", events, SCRIPT,
           "--seconds", str(seconds), "--slow-rank", str(slow_rank), "--slow-factor", str(slow_factor)]
    r = subprocess.run(cmd, env=env, capture_output=True, timeout=seconds + 180)
    with open(events) as f:
        evs = [json.loads(line) for line in f]
    started = min(e["time_ms"] for e in evs if e["event"] == "started")
    named = [(e["rank"], (e["time_ms"] - started) / 1000) for e in evs if e["event"] == "straggler"]
    return r.returncode, named


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--slow-runs", type=int, default=5)
    p.add_argument("--slow-seconds", type=float, default=45)
    p.add_argument("--slow-factor", type=float, default=1.5)
    p.add_argument("--balanced-runs", type=int, default=2)
    p.add_argument("--balanced-minutes", type=float, default=3)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = p.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    delays, misses = [], 0
    with tempfile.TemporaryDirectory(prefix="ddprun-bench-stragglers-") as tmp:
        for i in range(a.slow_runs):
            code, named = run(a.build, tmp, a.slow_seconds, 2, a.slow_factor)
            right = [t for rank, t in named if rank == 2]
            if code != 0 or not right or any(rank != 2 for rank, _ in named):
                misses += 1
            else:
                delays.append(right[0])
            print(f"slow run {i + 1}: exit {code}, named {named}", flush=True)
        false_reports = 0
        for i in range(a.balanced_runs):
            code, named = run(a.build, tmp, a.balanced_minutes * 60, -1, 1.0)
            false_reports += len(named)
            print(f"balanced run {i + 1} ({a.balanced_minutes:g} min): exit {code}, named {named}", flush=True)
    if delays:
        print(f"slow rank named in {len(delays)}/{a.slow_runs} runs; delay after the workers' start: median "
              f"{statistics.median(delays):.1f} s, range [{min(delays):.1f}, {max(delays):.1f}] s")
    print(f"misses: {misses}; false reports: {false_reports} in {a.balanced_runs} balanced runs of "
          f"{a.balanced_minutes:g} min")
    print(f"load average at end: {os.getloadavg()}")
    return 0 if misses == 0 and false_reports == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
