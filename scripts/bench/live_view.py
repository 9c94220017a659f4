#!/usr/bin/env python3
"""Issue 21's figures for the live view (docs/BENCHMARKS.md "Live view"):

  scripts/bench/live_view.py [--build build] [--seconds 120] [--workers 64] [--asks 20]

cost      ddprun --standalone with --workers test_workers that each beat 10 times a second for --seconds, three
          ways: the live view off (DDPRUN_STATUS_PERIOD_MS=0), on (the default 5 s), and on with
          --metrics-textfile; figure: the agent's own CPU time (utime+stime of the ddprun process, read from /proc
          just before it ends), median of --runs.
answer    a 3-node job on loopback (static ranks, 2 beating workers per node): `ddprun-status --json --run-id`
          from process start to exit, --asks times, median; every answer must hold 3 nodes and 6 ranks.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agent_cpu(build, workers, seconds, env_extra, args_extra):
    env = dict(os.environ, **env_extra)
    proc = subprocess.Popen([f"{build}/launcher/ddprun", "--standalone", "--nproc-per-node", str(workers),
                             "--hang-timeout", "600", *args_extra, f"{build}/tests/bin/test_worker",
                             f"beatfor={seconds}:100"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last = 0.0
    while proc.poll() is None:
        try:
            last = cpu_seconds(proc.pid)
        except (OSError, IndexError):
            break
        time.sleep(0.2)
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"job failed: {proc.stderr.read().decode()[-2000:]}")
    return last


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def answer_times(build, asks):
    runtime = tempfile.mkdtemp(prefix="ddprun_bench_view_")
    os.chmod(runtime, 0o700)
    env = dict(os.environ, DDPRUN_TOKEN="bench", XDG_RUNTIME_DIR=runtime)
    port = free_port()
    procs = [subprocess.Popen([f"{build}/launcher/ddprun", "--nnodes", "3", "--node-rank", str(n), "--master-addr",
                               "127.0.0.1", "--rdzv-port", str(port), "--run-id", "viewbench", "--nproc-per-node", "2",
                               "--hang-timeout", "600", f"{build}/tests/bin/test_worker", "beatfor=40:100"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in range(3)]
    try:
        status = [f"{build}/launcher/ddprun-status", "--json", "--run-id", "viewbench"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # every node has reported once
            jobs = json.loads(subprocess.run(status, env=env, capture_output=True, text=True).stdout or "[]")
            if jobs and all(len(j["nodes"]) == 3 for j in jobs):
                break
            time.sleep(0.5)
        times = []
        for _ in range(asks):
            t0 = time.monotonic()
            out = subprocess.run(status, env=env, capture_output=True, text=True).stdout
            times.append(time.monotonic() - t0)
            jobs = json.loads(out)
            ranks = sum(len(n["ranks"]) for n in jobs[0]["nodes"])
            if len(jobs[0]["nodes"]) != 3 or ranks != 6:
                raise SystemExit(f"incomplete view: {out[:500]}")
        return times
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "../../build"))
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--asks", type=int, default=20)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    times = answer_times(build, a.asks)
    print(f"3-node job, ddprun-status --json: median {statistics.median(times) * 1000:.1f} ms "
          f"[{min(times) * 1000:.1f}, {max(times) * 1000:.1f}] of {a.asks}", flush=True)
    textdir = tempfile.mkdtemp(prefix="ddprun_bench_textfile_")
    ways = [("off", {"DDPRUN_STATUS_PERIOD_MS": "0"}, []), ("on (5 s)", {}, []),
            ("on + --metrics-textfile", {}, ["--metrics-textfile", textdir])]
    results = {name: [] for name, _, _ in ways}
    for _ in range(a.runs):
        for name, env_extra, args_extra in ways:
            results[name].append(agent_cpu(build, a.workers, a.seconds, env_extra, args_extra))
            print(f"  {name}: {results[name][-1]:.2f} s CPU", flush=True)
    for name, values in results.items():
        print(f"agent CPU, {a.workers} workers beating 10/s for {a.seconds} s, live view {name}: median "
              f"{statistics.median(values):.2f} s [{min(values):.2f}, {max(values):.2f}] of {a.runs}")


if __name__ == "__main__":
    sys.exit(main())
