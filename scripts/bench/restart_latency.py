#!/usr/bin/env python3
"""Restart latency with 2 nodes (issue 10, figure 3): a worker fails -> every worker on every node running again.

Two launchers on loopback, 2 workers each (`--nproc`; `tests/bin/test_worker`), `--max-restarts 1`. Attempt 0:
every worker stamps its start (CLOCK_REALTIME, `stamp=`) and waits; once all are up and a random 0..--jitter s later (a
failure at a random point of torchrun's polling cycle), this script creates the file `go` and the last global
rank (on node 1) stamps and exits 1. Attempt 1: every worker stamps its start again, as its first step,
and exits 0, so the job then ends with exit 0 on both nodes (anything else counts as a failed run). One machine,
one clock. What is attempt 0 is told by the `go` file (`?go:` steps run only in a worker started before it
existed), not by TORCHELASTIC_RESTART_COUNT: torchrun 1.13 leaves that at 0 on the node that restarts for the
other node's failure (the table shows the counts each attempt-1 worker got).

  total  = the last attempt-1 worker's own start stamp (first step of its main) - the failing rank's stamp before exit=1
  ddprun = the agent's last `started` event of attempt 1 (fork/exec done, --events-file, ms resolution) - the same
           failure stamp: ddprun's own part; total - ddprun = the worker's own start-up (exec to main's first step)
ddprun runs both ways: static node ranks (`--nnodes 2 --node-rank R --master-addr 127.0.0.1 --rdzv-port P`) and
dynamic (`--rdzv-endpoint 127.0.0.1:P --rdzv-id X`; the agent listening there hosts the server). For ddprun the
events files also give each step of the restart round (see PHASES). torchrun 1.13 (Debian's python3-torch, c10d
backend, `--rdzv_conf is_host=` set so that exactly one agent hosts the TCPStore) runs at its default
--monitor_interval 5 and at 0.1; it has no events file, so only `total` is measured for it, the same way.

Runs are interleaved (each round runs every launcher once, in a rotating order) and each records the load
average. This script is a child subreaper (tests/support/harness.py): after each run it waits for every
process the launchers started to be gone (torchrun's agents, their TCPStore, workers), kills and reports whatever
is left, checks that nothing listens on the run's rendezvous port any more, and kills everything on Ctrl-C or
error. Exit status 1 if any run failed to restart or left a process or a listener behind.

usage: restart_latency.py [BUILD_DIR] [--runs N] [--only ddprun,ddprun-dyn,torchrun-5,torchrun-0.1] [--nproc N]
                          [--jitter SEC]    (the failure comes a random 0..SEC after all workers are up; 5)
                          [--trace DIR]     (ddprun --log-level debug, torchrun LOGLEVEL=INFO, each line of their
                                             stderr time-stamped when read, kept in DIR)
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from ports import free_port  # noqa: E402
# The integration tests' process tools; importing harness makes this process a child subreaper.
from harness import descendants, kill_all, reap_zombies  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# `python3 -c TORCHRUN_311 ARGS` is torch 1.13's torchrun with its Python 3.11 fix (Std.from_str).
from python_vs_torchrun import TORCHRUN_311  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's python3-torch is installed for this interpreter
NPROC = 2  # workers per node (--nproc); the failing worker is the last rank, on node 1
RUN_CAP_S = 60
LAUNCHERS = {
    "ddprun": "ddprun, static node ranks",
    "ddprun-dyn": "ddprun, dynamic (--rdzv-endpoint)",
    "torchrun-5": "torchrun 1.13 c10d, monitor 5 s (default)",
    "torchrun-0.1": "torchrun 1.13 c10d, monitor 0.1 s",
}
# ddprun's restart round as its events files show it, each the last node's time (ms) after the failure stamp.
PHASES = [
    ("reaped", "failing worker reaped (node 1)"),
    ("stop_order", "stop{restarting} received, both nodes (`restarting`)"),
    ("victims_gone", "attempt-0 workers all reaped, both nodes"),
    ("assigned", "attempt-1 assignment, both nodes (`rendezvous`, restart_count 1)"),
    ("first_spawned", "first attempt-1 worker spawned (`started`), either node"),
    ("spawned", "last attempt-1 worker spawned (`started`)"),
]


def still_listening(port):
    """Whether something still listens on the run's rendezvous port (a server or TCPStore left behind)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # connections in TIME_WAIT do not count
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def worker_steps(tmp):
    ready, go, first = os.path.join(tmp, "ready"), os.path.join(tmp, "go"), f"?{tmp}/go:"
    failing = f"@{2 * NPROC - 1}:{first}"
    return [f"stamp={tmp}/start", f"{first}ready={ready}", f"{failing}waitfile={go}", f"{failing}stamp={tmp}/fail",
            f"{failing}exit=1", f"{first}hang"]


def commands(kind, build, tmp, port):
    """The two nodes' command lines, node 0's first."""
    worker = os.path.join(build, "tests/bin/test_worker")
    steps = worker_steps(tmp)
    if kind.startswith("ddprun"):
        ddprun = os.path.join(build, "launcher/ddprun")
        cmds = []
        for node in range(2):
            common = [ddprun, "--nproc-per-node", str(NPROC), "--max-restarts", "1",
                      "--events-file", os.path.join(tmp, f"events.{node}")]
            if kind == "ddprun":
                where = ["--nnodes", "2", "--node-rank", str(node), "--master-addr", "127.0.0.1",
                         "--rdzv-port", str(port)]
            else:
                where = ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "restartbench"]
            cmds.append(common + where + [worker] + steps)
        return cmds
    interval = kind.split("-", 1)[1]
    return [[PYTHON, "-c", TORCHRUN_311, "--nnodes", "2", "--nproc_per_node", str(NPROC), "--rdzv_backend", "c10d",
             "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "restartbench",
             "--rdzv_conf", f"is_host={'true' if node == 0 else 'false'}", "--max_restarts", "1",
             "--monitor_interval", interval, "--no_python", worker] + steps
            for node in range(2)]


def read_stamps(path):
    """[(rank, TORCHELASTIC_RESTART_COUNT, pid, ns)] from a stamp file, in the order written."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(int(x) for x in line.split()) for line in f]


def pump_with_times(pipe, path):
    """Copies a launcher's stderr to `path`, each line prefixed with the wall clock when it was read."""
    with open(path, "w") as out:
        for line in iter(pipe.readline, b""):
            out.write(f"{time.time():.6f} {line.decode(errors='replace')}")


def ddprun_phases(tmp, fail_ns):
    """Each restart-round step's time after the failure stamp (ms), from both nodes' events files."""
    fail_ms = fail_ns / 1e6
    t = {}
    last_of = lambda key, value: t.__setitem__(key, max(t.get(key, float("-inf")), value))
    for node in range(2):
        attempt = 0
        with open(os.path.join(tmp, f"events.{node}")) as f:
            for line in f:
                e = json.loads(line)
                ev = e["event"]
                if ev == "rendezvous":
                    attempt = e["restart_count"]
                    if attempt == 1:
                        last_of("assigned", e["time_ms"])
                elif ev == "restarting":
                    last_of("stop_order", e["time_ms"])
                elif ev == "exited" and attempt == 0:
                    if e.get("state") == "failed":
                        t["reaped"] = e["time_ms"]
                    else:
                        last_of("victims_gone", e["time_ms"])
                elif ev == "started" and attempt == 1:
                    last_of("spawned", e["time_ms"])
                    t["first_spawned"] = min(t.get("first_spawned", float("inf")), e["time_ms"])
    # time_ms is truncated to the millisecond: +0.5 puts each at the middle of its millisecond.
    return {k: v + 0.5 - fail_ms for k, v in t.items()}


def one_run(kind, build, tmp, port, trace_dir, run_no, jitter):
    procs, pumps = [], []
    try:
        os.makedirs(os.path.join(tmp, "ready"))
        # TMPDIR: torchrun keeps its log directory (/tmp/torchelastic_*) after it exits; here it goes with `tmp`.
        env = dict(os.environ, DDPRUN_TOKEN="restart-bench", OMP_NUM_THREADS="1", TMPDIR=tmp)
        trace = trace_dir is not None
        if trace:
            env["LOGLEVEL"] = "INFO"  # torchrun's agents' own log
        for node, cmd in enumerate(commands(kind, build, tmp, port)):
            if trace:
                if kind.startswith("ddprun"):
                    cmd = cmd[:1] + ["--log-level", "debug"] + cmd[1:]
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
                path = os.path.join(trace_dir, f"{kind}.run{run_no}.node{node}.log")
                pumps.append(threading.Thread(target=pump_with_times, args=(p.stderr, path)))
                pumps[-1].start()
            else:
                with open(os.path.join(tmp, f"stderr.{node}"), "wb") as err:
                    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
            procs.append(p)
        deadline = time.monotonic() + RUN_CAP_S + jitter
        while len([f for f in os.listdir(os.path.join(tmp, "ready")) if not f.endswith(".tmp")]) < 2 * NPROC:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                return {"error": "attempt 0 did not start"}
            time.sleep(0.005)
        # At a random point of the launchers' cycles: torchrun polls its workers every --monitor_interval, and
        # a failure right after its first poll would always cost it a full interval.
        time.sleep(random.uniform(0, jitter))
        load = load_average()
        open(os.path.join(tmp, "go"), "w").close()
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        for t in pumps:
            t.join(timeout=5)
        fails = read_stamps(os.path.join(tmp, "fail"))
        # Every attempt-0 worker stamped before its ready file, and `go` came after all of them: the rest is attempt 1.
        attempt1 = read_stamps(os.path.join(tmp, "start"))[2 * NPROC:]
        result = {"load": load, "codes": codes,
                  "counts": " ".join(str(count) for _rank, count, _pid, _ns in sorted(attempt1))}
        if codes != [0, 0] or len(fails) != 1 or sorted(s[0] for s in attempt1) != list(range(2 * NPROC)):
            result["error"] = (f"no complete restart: exit codes {codes}, {len(attempt1)} of {2 * NPROC} "
                               f"workers started in attempt 1 (ranks, restart counts: "
                               f"{[(s[0], s[1]) for s in attempt1]})")
            return result
        fail = fails[0][3]
        result["total"] = (max(s[3] for s in attempt1) - fail) / 1e6
        if kind.startswith("ddprun"):
            result["phases"] = ddprun_phases(tmp, fail)
            result["ddprun"] = result["phases"]["spawned"]
        return result
    finally:
        for p in procs:  # a run cut short (cap, Ctrl-C): the launchers first, then whatever they left
            if p.poll() is None:
                p.kill()
                p.wait()
        for p in procs:
            if p.stderr:
                p.stderr.close()


def leftovers():
    """Every process the run left behind (re-parented to this subreaper), killed; their names."""
    reap_zombies()
    deadline = time.monotonic() + 5  # a launcher's exit may still be reaping its own children
    while descendants() and time.monotonic() < deadline:
        time.sleep(0.01)
        reap_zombies()
    left = descendants()
    names = []
    for pid in left:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            names.append(f"{pid}:{cmdline[:80]}")
        except OSError:
            pass
    kill_all(left)
    reap_zombies()
    return names


def fmt(values):
    if not values:
        return "—"
    return f"**{statistics.median(values):.1f}** [{min(values):.1f}, {max(values):.1f}]"


def interruptible_runs_of(names, known):
    """The launchers named (comma-separated) in `names`, each a key of `known` (else exit, naming the choices).
    From here on Ctrl-C (even where a shell started us with SIGINT ignored) and SIGTERM end the runs through the
    caller's `finally`, which kills every process the launchers left."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    kinds = names.split(",")
    for k in kinds:
        if k not in known:
            sys.exit(f"unknown launcher {k}; one of {', '.join(known)}")
    return kinds


def main():
    global NPROC
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--only", default=",".join(LAUNCHERS))
    ap.add_argument("--trace", metavar="DIR")
    ap.add_argument("--nproc", type=int, default=NPROC, help="workers per node (default 2)")
    ap.add_argument("--jitter", type=float, default=5.0,
                    help="wait a uniform random 0..SEC once all workers are up, before the failure (default 5: "
                         "torchrun 1.13's default monitor interval)")
    args = ap.parse_args()
    NPROC = args.nproc
    kinds = interruptible_runs_of(args.only, LAUNCHERS)
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
    build = os.path.abspath(args.build)
    results = {k: [] for k in kinds}
    failed = False
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {os.cpu_count()} CPUs, build {build}",
          flush=True)
    try:
        for i in range(args.runs):
            order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]
            for kind in order:
                tmp = tempfile.mkdtemp(prefix="ddprun_restart_bench_")
                try:
                    port = free_port()
                    r = one_run(kind, build, tmp, port, args.trace, i, args.jitter)
                    left = leftovers()
                    if still_listening(port):
                        left.append(f"a listener on port {port}")
                    if left:
                        r["error"] = (r.get("error", "") + f"; left behind: {left}").lstrip("; ")
                    if "error" in r:
                        failed = True
                        print(f"run {i} {kind}: FAILED: {r['error']}", flush=True)
                        for node in range(2):
                            path = os.path.join(tmp, f"stderr.{node}")
                            if os.path.exists(path):
                                with open(path, errors="replace") as f:
                                    print(f"--- node {node} stderr (end) ---\n{f.read()[-2000:]}")
                    else:
                        extra = f", ddprun's part {r['ddprun']:.1f} ms" if "ddprun" in r else ""
                        print(f"run {i} {kind}: {r['total']:.1f} ms{extra} (load {r['load']:.2f})", flush=True)
                    results[kind].append(r)
                finally:
                    kill_all(descendants())  # only on an interruption is anything still there
                    reap_zombies()
                    shutil.rmtree(tmp, ignore_errors=True)
    finally:
        kill_all(descendants())
        reap_zombies()

    ok = {k: [r for r in rs if "error" not in r] for k, rs in results.items()}
    loads = [r["load"] for rs in results.values() for r in rs if "load" in r]
    print(f"\nload average (1 min) at the failures: {min(loads, default=0):.2f}-{max(loads, default=0):.2f}, "
          f"median {statistics.median(loads) if loads else 0:.2f}; uptime: "
          f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}\n")
    base = [r["total"] for r in ok.get("ddprun", [])]
    print("| launcher | runs ok | failure → ddprun spawned the last worker (ms) | failure → every worker's main "
          f"running (ms) | torchrun / ddprun | TORCHELASTIC_RESTART_COUNT of ranks 0-{2 * NPROC - 1} in attempt 1 |")
    print("|---|---|---|---|---|---|")
    for k in kinds:
        totals = [r["total"] for r in ok[k]]
        ratio = (f"{statistics.median(totals) / statistics.median(base):.0f}×"
                 if totals and base and not k.startswith("ddprun") else "")
        part = fmt([r["ddprun"] for r in ok[k] if "ddprun" in r]) if k.startswith("ddprun") else "—"
        counts = sorted({r["counts"] for r in results[k] if r.get("counts")})
        print(f"| {LAUNCHERS[k]} | {len(ok[k])}/{len(results[k])} | {part} | {fmt(totals)} | {ratio} | "
              f"{'; '.join(counts)} |")
    for k in kinds:
        if not k.startswith("ddprun") or not ok[k]:
            continue
        print(f"\n{LAUNCHERS[k]}: the restart round, ms after the failing worker's stamp (median [min, max]; "
              f"events files, 1 ms resolution)\n")
        print("| step | time |")
        print("|---|---|")
        for key, label in PHASES:
            print(f"| {label} | {fmt([r['phases'][key] for r in ok[k] if key in r['phases']])} |")
        startup = [r["total"] - r["ddprun"] for r in ok[k]]
        print(f"| worker's own start-up (total − spawned) | {fmt(startup)} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
