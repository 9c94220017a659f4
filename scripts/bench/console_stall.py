#!/usr/bin/env python3
"""ddprun with a console that does not drain (docs/BENCHMARKS.md, "Stalled console").

1. Failure to every process gone: rank 0 floods its console, rank 1 exits 3 after 1 s. Measured from rank 1's
   exit (its `exited` event) to the moment no worker pid is alive, with a draining console and with one nobody
   reads. Goal: the same milliseconds.
2. Event-loop lateness: 2 workers write MB megabytes in all to a reader that takes 64 KiB every 2 ms (a slow ssh);
   DDPRUN_LOOP_PROBE_MS=1 makes ddprun log the longest lateness of a 1 ms timer on its loop (wall time: includes
   the scheduler not running the thread) and the most CPU time the loop used between two ticks (its longest
   stretch of own work). Goal: <= 10 ms.

    scripts/bench/console_stall.py [--runs 5] [--mb 800]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
DDPRUN = os.environ.get("DDPRUN", os.path.join(ROOT, "build/launcher/ddprun"))
WORKER = os.environ.get("TEST_WORKER", os.path.join(ROOT, "build/tests/bin/test_worker"))


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:].split()[0] != b"Z"
    except OSError:
        return False


def reader(fd, delay, sink):
    while True:
        if delay:
            time.sleep(delay)
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        sink[0] += len(chunk)
    os.close(fd)


def failure_to_gone(stalled, tmp):
    events = os.path.join(tmp, f"ev{time.monotonic_ns()}.jsonl")
    pidfile = os.path.join(tmp, f"pids{time.monotonic_ns()}")
    r, w = os.pipe()
    proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2", "--events-file", events, WORKER, f"pidfile={pidfile}",
                             "@0:flood=4000000000", "@1:sleep=1", "@1:exit=3"], stdout=w,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(w)
    sink = [0]
    t = None
    if not stalled:
        t = threading.Thread(target=reader, args=(r, 0, sink), daemon=True)
        t.start()
    while not os.path.exists(pidfile) or len(open(pidfile).read().split("\n")) < 3:
        time.sleep(0.001)
    pids = [int(line.split()[1]) for line in open(pidfile).read().split("\n") if line]
    while any(alive(p) for p in pids):
        time.sleep(0.0005)
    gone_ms = time.time() * 1000
    if stalled:
        t = threading.Thread(target=reader, args=(r, 0, sink), daemon=True)
        t.start()
    proc.wait(timeout=60)
    t.join()
    exited = [json.loads(line) for line in open(events) if '"exited"' in line]
    failed_ms = min(e["time_ms"] for e in exited if e.get("exit_code") == 3)
    assert proc.returncode == 3, proc.returncode
    return gone_ms - failed_ms


def loop_lateness(mb):
    r, w = os.pipe()
    per_rank = mb * 1000 * 1000 // 2
    proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2", WORKER, f"flood={per_rank}"], stdout=w,
                            stderr=subprocess.PIPE, env=dict(os.environ, DDPRUN_LOOP_PROBE_MS="1"),
                            start_new_session=True)
    os.close(w)
    sink = [0]
    t = threading.Thread(target=reader, args=(r, 0.002, sink), daemon=True)
    t0 = time.monotonic()
    t.start()
    _, err = proc.communicate(timeout=3600)
    t.join()
    m = re.search(rb"longest lateness (\d+) us", err)
    cpu = re.search(rb"CPU time in that period: (\d+) us", err)
    work = re.search(rb"longest stretch of loop work: (\d+) us", err)
    return (int(m.group(1)) / 1000.0, sink[0] / 1e6, time.monotonic() - t0, int(cpu.group(1)) / 1000.0,
            int(work.group(1)) / 1000.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=800)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for stalled in (False, True):
            xs = [failure_to_gone(stalled, tmp) for _ in range(a.runs)]
            print(f"failure -> every worker gone, console {'stalled ' if stalled else 'draining'}: median "
                  f"{statistics.median(xs):.1f} ms (runs: {', '.join(f'{x:.1f}' for x in xs)})")
    xs = [loop_lateness(a.mb) for _ in range(max(1, a.runs // 2))]
    for late, got, secs, cpu, work in xs:
        print(f"{a.mb} MB to a slow reader: {got:.0f} MB read in {secs:.1f} s, longest loop lateness {late:.2f} ms "
              f"(the loop thread's CPU time in that period: {cpu:.2f} ms); longest stretch of loop work "
              f"{work:.2f} ms of CPU")
    print(f"median longest lateness {statistics.median(x[0] for x in xs):.2f} ms wall, median longest stretch of "
          f"loop work {statistics.median(x[4] for x in xs):.2f} ms CPU (goal <= 10 ms)")


if __name__ == "__main__":
    sys.exit(main())
