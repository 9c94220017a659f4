#!/usr/bin/env python3
"""Two ways back into an elastic or restarted job (issue 19), timed on loopback with test_worker workers:

rejoin   3 agents, --nnodes 1:3, the first hosting the rendezvous, --heartbeat-timeout 2. Each cycle freezes the
         third agent (SIGSTOP; its workers run on) until the other two re-formed without it, then resumes it
         (SIGCONT) and measures, from the SIGCONT, until its events file says it was placed in a new round
         (`rendezvous`) and until its first worker of that round started (`started`). The stale workers' teardown
         (SIGTERM, test_worker dies at once) is inside the figure.
regather 2 agents, --nnodes 2, under a separate ddprun-rendezvous (--max-restarts 1). Rank 1 exits 3, the job
         re-forms, and the server is SIGKILLed while rank 0 takes 1 s to exit on SIGTERM; a new server is started at
         once. Measured: from when round 1 could first be gathered (the new server listening and every round-0 worker
         gone, whichever came last) until both agents were placed in round 1 (`rendezvous`).

usage: rejoin.py BUILD_DIR [RUNS]          e.g. rejoin.py build 10
Prints each run and the median of each figure."""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from ports import free_port, listening  # noqa: E402

BOUND = 60


def events(path, kind):
    try:
        with open(path) as f:
            lines = f.read().split("\n")[:-1]
    except FileNotFoundError:
        return []
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def wait_for(what, check):
    deadline = time.monotonic() + BOUND
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)


def ddprun(build, args, env):
    return subprocess.Popen([os.path.join(build, "launcher/ddprun"), *map(str, args)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop_all(procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def rejoin(build, tmp, runs):
    port = free_port()
    env = dict(os.environ, DDPRUN_TOKEN="bench")
    ev = [os.path.join(tmp, f"rejoin{n}.jsonl") for n in range(3)]
    agents = []
    for n in range(3):
        agents.append(ddprun(build, ["--nnodes", "1:3", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "rejoin",
                                     "--rdzv-conf", "last_call_timeout=1,max_departures=1000", "--nproc-per-node", 1,
                                     "--heartbeat-interval", "0.2", "--heartbeat-timeout", "2", "--term-timeout", 2,
                                     "--events-file", ev[n], os.path.join(build, "tests/bin/test_worker"), "hang"],
                            env))
        if n == 0:
            wait_for("the host to listen", lambda: listening(port))
    figures = []
    try:
        wait_for("the first round's workers", lambda: all(events(e, "started") for e in ev))
        for run in range(runs):
            before_host = len(events(ev[0], "rendezvous"))
            before_c = len(events(ev[2], "rendezvous"))
            started_c = len(events(ev[2], "started"))
            os.kill(agents[2].pid, signal.SIGSTOP)
            try:
                wait_for("the re-form without it", lambda: len(events(ev[0], "rendezvous")) > before_host)
                time.sleep(0.2)
            finally:
                t0 = time.time()
                os.kill(agents[2].pid, signal.SIGCONT)
            placed = wait_for("its new round", lambda: events(ev[2], "rendezvous")[before_c:])[0]["time_ms"] / 1e3
            started = wait_for("its new workers", lambda: events(ev[2], "started")[started_c:])[0]["time_ms"] / 1e3
            wait_for("the host in the round with it", lambda: len(events(ev[0], "rendezvous")) > before_host + 1)
            figures.append((placed - t0, started - t0))
            print(f"rejoin run {run + 1}: placed {1e3 * (placed - t0):.0f} ms, worker started "
                  f"{1e3 * (started - t0):.0f} ms after SIGCONT", flush=True)
            time.sleep(0.5)
    finally:
        stop_all(agents)
    return figures


def regather(build, tmp, run):
    port = free_port()
    env = dict(os.environ, DDPRUN_TOKEN="bench")
    marker, go = os.path.join(tmp, f"marker{run}"), os.path.join(tmp, f"go{run}")
    ev = [os.path.join(tmp, f"regather{run}.{n}.jsonl") for n in range(2)]

    def server():
        proc = subprocess.Popen([os.path.join(build, "rendezvous/ddprun-rendezvous"), "--rdzv-id", "regather",
                                 "--nnodes", "2", "--max-restarts", "1", "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for("the server to listen", lambda: listening(port) or proc.poll() is not None)
        return proc

    first = server()
    ready = os.path.join(tmp, f"ready{run}")
    os.mkdir(ready)
    steps = ["termexit=1", f"ready={ready}", f"?{marker}:waitfile={go}", f"@1:?{marker}:exit=3", f"?{marker}:hang",
             "exit=0"]
    agents = [ddprun(build, ["--nnodes", 2, "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "regather",
                             "--rdzv-conf", "is_host=false", "--nproc-per-node", 1, "--events-file", ev[n],
                             os.path.join(build, "tests/bin/test_worker"), *steps], env) for n in range(2)]
    second = None
    try:
        # The workers' own word (their `?PATH:` checks are made at their start), not the `started` events.
        wait_for("round 0", lambda: len(os.listdir(ready)) == 2)
        open(marker, "w").close()
        open(go, "w").close()
        wait_for("the re-form", lambda: all(events(e, "restarting") for e in ev))
        first.kill()
        first.wait()
        second = server()
        listened = time.time()
        placed = wait_for("round 1", lambda: all(len(events(e, "rendezvous")) == 2 for e in ev) and
                          max(events(e, "rendezvous")[1]["time_ms"] for e in ev) / 1e3)
        # From when the round could first be gathered: the new server listening and every round-0 worker gone
        # (rank 0 takes 1 s on purpose, and the hellos wait for it), whichever came last.
        gone = max(e["time_ms"] for path in ev for e in events(path, "exited")) / 1e3
        t0 = max(listened, gone)
        codes = [a.wait(timeout=BOUND) for a in agents]
        if codes != [0, 0]:
            raise RuntimeError(f"the agents exited {codes}")
    finally:
        stop_all(agents + [first] + ([second] if second else []))
    print(f"regather run {run + 1}: both placed in round 1 {1e3 * (placed - t0):.0f} ms after the new server "
          f"listened and the old round's workers were gone ({1e3 * (gone - listened):+.0f} ms)", flush=True)
    return placed - t0


def main():
    build = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    with tempfile.TemporaryDirectory() as tmp:
        back = rejoin(build, tmp, runs)
        gathered = [regather(build, tmp, run) for run in range(runs)]
    print(f"rejoin: median placed {1e3 * statistics.median(p for p, _ in back):.0f} ms, worker started "
          f"{1e3 * statistics.median(s for _, s in back):.0f} ms after SIGCONT ({runs} runs)")
    print(f"regather: median {1e3 * statistics.median(gathered):.0f} ms from the new server listening (and the "
          f"old round's workers gone) to both agents placed in round 1 ({runs} runs)")


if __name__ == "__main__":
    main()
