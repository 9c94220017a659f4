#!/usr/bin/env python3
"""Cross-node teardown latency: N ddprun agents on loopback (static node ranks), 2 workers each, all
sleeping; one worker on the last node exits 1. Latency = last worker reaped on any node - the failing
worker reaped, both from each agent's --events-file (same clock: one machine). Also: failure → every
ddprun exited.

usage: multinode_teardown.py BUILD_DIR [RUNS] [NODES...]     e.g. multinode_teardown.py build 20 2 4
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from ports import free_port  # noqa: E402


def one_run(build, nnodes, tmp):
    ddprun = os.path.join(build, "launcher/ddprun")
    worker = os.path.join(build, "tests/bin/test_worker")
    ready, go = os.path.join(tmp, "ready"), os.path.join(tmp, "go")
    os.makedirs(ready, exist_ok=True)
    for f in os.listdir(ready):
        os.unlink(os.path.join(ready, f))
    if os.path.exists(go):
        os.unlink(go)
    port, nproc = free_port(), 2
    failing = nnodes * nproc - 1
    env = dict(os.environ, DDPRUN_TOKEN="bench")
    procs, events = [], []
    for r in range(nnodes):
        ev = os.path.join(tmp, f"events.{r}")
        events.append(ev)
        procs.append(subprocess.Popen(
            [ddprun, "-q", "--nnodes", str(nnodes), "--node-rank", str(r), "--master-addr", "127.0.0.1",
             "--rdzv-port", str(port), "--nproc-per-node", str(nproc), "--events-file", ev, worker,
             f"ready={ready}", f"@{failing}:waitfile={go}", f"@{failing}:exit=1", "hang"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
    deadline = time.monotonic() + 30
    def ready_count():
        return len([f for f in os.listdir(ready) if not f.endswith(".tmp")])
    while ready_count() < nnodes * nproc and time.monotonic() < deadline:
        time.sleep(0.005)
    if ready_count() < nnodes * nproc:
        raise SystemExit("workers did not start")
    t0 = time.monotonic()
    open(go, "w").close()
    codes = [p.wait(timeout=30) for p in procs]
    wall = (time.monotonic() - t0) * 1000
    if set(codes) != {1}:
        raise SystemExit(f"unexpected exit codes {codes}")
    fail_ms, last_ms = None, 0
    for ev in events:
        with open(ev) as f:
            for line in f:
                e = json.loads(line)
                if e.get("event") != "exited":
                    continue
                if e["state"] == "failed":
                    fail_ms = e["time_ms"]
                last_ms = max(last_ms, e["time_ms"])
    return last_ms - fail_ms, wall


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    sizes = [int(n) for n in sys.argv[3:]] or [2, 4]
    print(f"| nodes | workers | runs | teardown median | p90 | max | go → every ddprun exited (median) |")
    print(f"|---|---|---|---|---|---|---|")
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="ddprun_mn_bench_") as tmp:
            lat, walls = [], []
            for _ in range(runs):
                l, w = one_run(build, n, tmp)
                lat.append(l)
                walls.append(w)
        lat.sort()
        p90 = lat[min(len(lat) - 1, int(0.9 * len(lat)))]
        print(f"| {n} | {2 * n} | {runs} | {statistics.median(lat):.0f} ms | {p90:.0f} ms | {max(lat):.0f} ms | "
              f"{statistics.median(walls):.1f} ms |")


if __name__ == "__main__":
    main()
