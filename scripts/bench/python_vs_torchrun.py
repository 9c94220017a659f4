#!/usr/bin/env python3
"""The Python examples under ddprun and under torchrun 1.13 (Debian's python3-torch), same machine, same run,
runs interleaved (the machine is shared: each run records the load average next to it).

1. wall: from the command to its exit, `examples/python/fashion_mnist_ddp.py --max-steps 200`, 2 ranks.
2. teardown: from a rank's exception (`examples/python/record_failure.py --fail-rank 1`, which stamps the time
   just before raising) to every process gone: the launcher exited and no descendant left (this script is a
   child subreaper, so whatever the launcher leaves behind is re-parented to it and counted).

torchrun 1.13 runs at its default --monitor_interval 5 and at 0.1 (torch 2.x's default). Debian's torch 1.13 on
Python 3.11 cannot parse torchrun's own --redirects default (Std.from_str returns None after an IntFlag change in
3.11); the launcher line below replaces that one function before calling torch.distributed.run's main.

Usage: scripts/bench/python_vs_torchrun.py BUILD_DIR [--runs N] [--teardown-runs N] [--steps N]
Prints a Markdown table of medians and ratios (torchrun / ddprun).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
PYTHON = "/usr/bin/python3"  # Debian's python3-torch is installed for this interpreter
TRAIN = os.path.join(ROOT, "examples/python/fashion_mnist_ddp.py")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
# The integration tests' process tools; importing it makes this process a child subreaper.
from harness import descendants, reap_zombies  # noqa: E402
FAIL = os.path.join(ROOT, "examples/python/record_failure.py")

# torchrun with Std.from_str fixed for Python 3.11 (see the docstring); argv after -c goes to torchrun.
TORCHRUN_311 = """
import re, sys
from torch.distributed.elastic.multiprocessing.api import Std
def std_from_str(text):
    if re.fullmatch(r"[0-3]", text):
        return Std(int(text))
    pairs = [item.split(":") for item in text.split(",")]
    return {int(rank): Std(int(mask)) for rank, mask in pairs}
Std.from_str = staticmethod(std_from_str)
from torch.distributed.run import main
sys.argv[0] = "torchrun"
sys.exit(main())
"""

def launchers(build):
    ddprun = os.path.join(build, "launcher/ddprun")
    torchrun = [PYTHON, "-c", TORCHRUN_311, "--standalone", "--nproc_per_node", "2"]
    return {
        "ddprun": [ddprun, "--nproc-per-node", "2"],
        "torchrun 1.13 (monitor 5 s)": torchrun + ["--monitor_interval", "5"],
        "torchrun 1.13 (monitor 0.1 s)": torchrun + ["--monitor_interval", "0.1"],
    }


def run(cmd, env):
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    return time.monotonic() - t0, proc


def wall_once(prefix, steps, env):
    seconds, proc = run(prefix + [TRAIN, "--max-steps", str(steps)], env)
    if proc.returncode != 0 or f"finished at step {steps}".encode() not in proc.stdout:
        sys.exit(f"{prefix[0]}: training failed (exit {proc.returncode}):\n{proc.stdout[-3000:].decode()}")
    return seconds


def teardown_once(prefix, env, tmp):
    mark = os.path.join(tmp, "raised_at")
    if os.path.exists(mark):
        os.remove(mark)
    proc = subprocess.Popen(prefix + [FAIL, "--fail-rank", "1", "--mark", mark], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.wait(timeout=600)
    while True:  # the launcher is gone; now every process it started must be
        reap_zombies()
        if not descendants():
            gone = time.time()
            break
        time.sleep(0.001)
    if proc.returncode == 0 or not os.path.exists(mark):
        sys.exit(f"{prefix[0]}: the failing job did not fail as planned (exit {proc.returncode})")
    with open(mark) as f:
        return gone - float(f.read())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build")
    p.add_argument("--runs", type=int, default=3, help="wall-time runs per launcher")
    p.add_argument("--teardown-runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="ddprun_pybench_")
    env = dict(os.environ, PYTHON_EXEC=PYTHON, TMPDIR=tmp, OMP_NUM_THREADS="1")
    cmds = launchers(args.build)
    wall = {name: [] for name in cmds}
    teardown = {name: [] for name in cmds}
    loads = []
    print(f"# {os.uname().nodename}, {os.cpu_count()} cores; load average at start {os.getloadavg()}", flush=True)
    for i in range(max(args.runs, args.teardown_runs)):
        for name, prefix in cmds.items():  # interleaved: each round runs every launcher once
            if i < args.runs:
                loads.append(os.getloadavg()[0])
                wall[name].append(wall_once(prefix, args.steps, env))
                print(f"wall     {name:32s} run {i}: {wall[name][-1]:.2f} s (load {loads[-1]:.1f})", flush=True)
            if i < args.teardown_runs:
                loads.append(os.getloadavg()[0])
                teardown[name].append(teardown_once(prefix, env, tmp))
                print(f"teardown {name:32s} run {i}: {teardown[name][-1] * 1000:.0f} ms (load {loads[-1]:.1f})",
                      flush=True)
    subprocess.run(["rm", "-rf", tmp])
    base_wall, base_td = statistics.median(wall["ddprun"]), statistics.median(teardown["ddprun"])
    print(f"\nload average (1 min) during the runs: median {statistics.median(loads):.1f}, "
          f"min {min(loads):.1f}, max {max(loads):.1f}\n")
    print(f"| launcher | wall, {args.steps} steps (median of {args.runs}) | ratio | exception → all gone "
          f"(median of {args.teardown_runs}) | ratio |")
    print("|---|---|---|---|---|")
    for name in cmds:
        w, t = statistics.median(wall[name]), statistics.median(teardown[name])
        print(f"| {name} | {w:.2f} s | {w / base_wall:.2f}× | {t * 1000:.0f} ms | {t / base_td:.1f}× |")


if __name__ == "__main__":
    main()
