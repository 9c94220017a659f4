#!/usr/bin/env python3
"""Output forwarding against direct writes (docs/BENCHMARKS.md, "4. Output", issue 35).

2 workers (`test_worker flood=BYTES`: ~100-byte lines, written 64 KiB at a time) write through ddprun into a sink,
against the same 2 processes writing straight into the same kind of sink:
  - file: ddprun's stdout (or the 2 workers' stdout) is one file opened once (one shared offset);
  - pipe: a pipe read by `cat >/dev/null`.
Variants of ddprun (`--standalone --nproc-per-node 2 -q`): the default `[rankN]: ` prefix, `--no-prefix`,
`--log-dir D --tee 3` (files and the console), and for the file sink `--log-dir D --redirects 3` (files only, the
console gets nothing: its figure is the per-rank files against the one direct file).

Runs are interleaved (every command once, RUNS times) so that foreign load hits all alike; one or more ddprun
binaries may be compared in the same run (`--ddprun before=PATH --ddprun after=PATH`). Printed per command: the
median wall time, the bytes/s the workers wrote (2 x BYTES / wall), the overhead against the direct writes to the
same sink, the median CPU time of everything (workers, ddprun, cat) and ddprun's own CPU (all its threads, read
from /proc when it has exited and before it is reaped). Then PROBE_RUNS more runs of each ddprun command with
DDPRUN_LOOP_PROBE_MS=1 (not timed: the probe wakes the loop every ms): the loop's longest stretch of own work
(CPU between two ticks; goal <= 10 ms) and its longest wall-clock lateness.

    scripts/bench/output_sinks.py [--ddprun [LABEL=]PATH ...] [--worker PATH] [--runs 5] [--bytes 800000000]
                                  [--sinks file,pipe] [--variants prefix,no-prefix,tee,redirect] [--probe-runs 1]
                                  [--dir DIR]   (where the files go; default: a new directory in /dev/shm, else
                                                 $TMPDIR: a disk's writeback and discards are noise that is not
                                                 ddprun's; --dir /tmp/x measures the disk too)
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")
TICK = os.sysconf("SC_CLK_TCK")

VARIANTS = {
    "prefix": [],
    "no-prefix": ["--no-prefix"],
    "tee": ["--log-dir", "{logs}", "--tee", "3"],
    "redirect": ["--log-dir", "{logs}", "--redirects", "3"],
}


def own_cpu_at_exit(pid):
    """Polls until `pid` is a zombie (exited, not yet reaped): then its utime+stime (every thread) in seconds."""
    last = 0.0
    while True:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            return last
        last = (int(fields[11]) + int(fields[12])) / TICK
        if fields[0] == b"Z":
            return last
        time.sleep(0.01)


def run_once(cmd, sink, work, env=None):
    """One run: `cmd` is ("direct", [argv, argv]) or ("ddprun", argv). Returns (wall s, CPU s, ddprun CPU s, stderr)."""
    kind, argv = cmd
    logs = os.path.join(work, "logs")
    out_path = os.path.join(work, "out")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    reader = None
    if sink == "file":
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    else:
        reader = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        out = os.dup(reader.stdin.fileno())
        reader.stdin.close()
    err_path = os.path.join(work, "stderr")
    with open(err_path, "wb") as err:
        t0 = time.monotonic()
        own = 0.0
        if kind == "direct":
            procs = [subprocess.Popen(a, stdout=out, stderr=err, env=dict(os.environ, RANK=str(r)))
                     for r, a in enumerate(argv)]
            codes = [p.wait() for p in procs]
        else:
            a = [x.replace("{logs}", logs) for x in argv]
            p = subprocess.Popen(a, stdout=out, stderr=err, env=env, start_new_session=True)
            own = own_cpu_at_exit(p.pid)
            codes = [p.wait()]
        os.close(out)
        if reader:
            codes.append(reader.wait())
        wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(err_path, "rb") as f:
        stderr = f.read()
    if any(codes):
        sys.exit(f"output_sinks: {' '.join(map(str, argv))} failed ({codes}): {stderr[-500:]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    for path in (out_path, logs):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)
    return wall, cpu, own, stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ddprun", action="append", default=[])
    ap.add_argument("--worker", default=os.environ.get("TEST_WORKER", os.path.join(ROOT, "build/tests/bin/test_worker")))
    ap.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", 5)))
    ap.add_argument("--bytes", type=int, default=int(os.environ.get("BYTES", 800_000_000)))
    ap.add_argument("--sinks", default="file,pipe")
    ap.add_argument("--variants", default="prefix,no-prefix,tee,redirect")
    ap.add_argument("--probe-runs", type=int, default=int(os.environ.get("PROBE_RUNS", 1)))
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    binaries = [(d.split("=", 1) if "=" in d else ("ddprun", d)) for d in a.ddprun] or \
        [("ddprun", os.environ.get("DDPRUN", os.path.join(ROOT, "build/launcher/ddprun")))]
    sinks = a.sinks.split(",")
    variants = a.variants.split(",")
    worker = [a.worker, f"flood={a.bytes}"]

    commands = []  # (sink, name, cmd)
    for sink in sinks:
        commands.append((sink, "direct", ("direct", [worker, worker])))
        for label, path in binaries:
            for v in variants:
                if v == "redirect" and sink != "file":
                    continue  # nothing reaches the pipe
                argv = [path, "-q", "--standalone", "--nproc-per-node", "2", *VARIANTS[v], *worker]
                commands.append((sink, f"{label} {v}" if len(binaries) > 1 else v, ("ddprun", argv)))

    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = a.dir or tempfile.mkdtemp(prefix="ddprun-output-bench-", dir=shm)
    os.makedirs(work, exist_ok=True)
    results = {i: [] for i in range(len(commands))}
    try:
        print(f"== output: 2 x {a.bytes} bytes of ~100-byte lines, {a.runs} runs, files in {work} "
              f"(load: {open('/proc/loadavg').read().split()[:3]})", flush=True)
        for _ in range(a.runs):
            for i, (sink, _, cmd) in enumerate(commands):
                results[i].append(run_once(cmd, sink, work)[:3])
        probes = {}
        for _ in range(a.probe_runs):
            for i, (sink, _, cmd) in enumerate(commands):
                if cmd[0] != "ddprun":
                    continue
                argv = [x for x in cmd[1] if x != "-q"]
                stderr = run_once(("ddprun", argv), sink, work, env=dict(os.environ, DDPRUN_LOOP_PROBE_MS="1"))[3]
                work_us = re.search(rb"longest stretch of loop work: (\d+) us", stderr)
                late_us = re.search(rb"longest lateness (\d+) us", stderr)
                if work_us and late_us:
                    probes.setdefault(i, []).append((int(work_us.group(1)) / 1000, int(late_us.group(1)) / 1000))
    finally:
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)

    total = 2 * a.bytes
    print(f"load after: {open('/proc/loadavg').read().split()[:3]}")
    print(f"{'sink':5} {'what':22} {'wall s':>7} {'MB/s':>7} {'overhead':>9} {'CPU s':>7} {'CPU over':>9} "
          f"{'ddprun CPU s':>12} {'loop work ms':>12} {'late ms':>8}  wall runs (s)")
    base = {}
    for i, (sink, name, cmd) in enumerate(commands):
        wall = statistics.median(r[0] for r in results[i])
        cpu = statistics.median(r[1] for r in results[i])
        own = statistics.median(r[2] for r in results[i])
        if cmd[0] == "direct":
            base[sink] = (wall, cpu)
        over = "" if cmd[0] == "direct" else f"{(wall / base[sink][0] - 1) * 100:+.1f}%"
        cover = "" if cmd[0] == "direct" else f"{(cpu / base[sink][1] - 1) * 100:+.1f}%"
        pr = probes.get(i, []) if cmd[0] == "ddprun" else []
        loop = f"{max(p[0] for p in pr):.2f}" if pr else ""
        late = f"{max(p[1] for p in pr):.1f}" if pr else ""
        owns = f"{own:.2f}" if cmd[0] == "ddprun" else ""
        print(f"{sink:5} {name:22} {wall:7.2f} {total / wall / 1e6:7.0f} {over:>9} {cpu:7.2f} {cover:>9} {owns:>12} "
              f"{loop:>12} {late:>8}  " + " ".join(f"{r[0]:.2f}" for r in results[i]))
    print("goal: wall overhead <= 3% against the direct writes; the loop's longest stretch of work <= 10 ms")


if __name__ == "__main__":
    sys.exit(main())
