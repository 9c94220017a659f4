#!/usr/bin/env python3
"""A restarted ddprun-rendezvous (issue 19): N agents (dynamic node ranks, 1 worker each) under a separate
ddprun-rendezvous on loopback; once the workers run, the server is SIGKILLed, started again DOWN s later on the
same port, and the time from its restart (it listens again) to every agent's "resumed round" line is measured
(agents' stderr polled every ms). Then the workers are released and every ddprun must exit 0.

usage: rdzv_restart.py BUILD_DIR [RUNS] [NODES] [DOWN]      e.g. rdzv_restart.py build 10 2 2
"""
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from ports import free_port, listening  # noqa: E402


def read_until(proc, needle, deadline, seen):
    os.set_blocking(proc.stderr.fileno(), False)
    while needle not in seen:
        if time.monotonic() > deadline:
            raise RuntimeError(f"never said {needle!r}: {seen[-2000:]!r}")
        chunk = proc.stderr.read()
        if chunk:
            seen += chunk
        else:
            time.sleep(0.001)
    return seen


def server(build, port, env):
    proc = subprocess.Popen([os.path.join(build, "rendezvous/ddprun-rendezvous"), "--rdzv-id", "bench", "--nnodes",
                             str(NODES), "--host", "127.0.0.1", "--port", str(port), "--heartbeat-timeout", "5"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while not listening(port):
        if proc.poll() is not None:
            raise RuntimeError(f"ddprun-rendezvous exited {proc.returncode}")
        time.sleep(0.0005)
    return proc, time.monotonic()


def one_run(build, tmp, down):
    port = free_port()
    env = dict(os.environ, DDPRUN_TOKEN="bench")
    ready, go = os.path.join(tmp, "ready"), os.path.join(tmp, "go")
    os.makedirs(ready, exist_ok=True)
    for f in os.listdir(ready):
        os.unlink(os.path.join(ready, f))
    if os.path.exists(go):
        os.unlink(go)
    first, _ = server(build, port, env)
    agents = [subprocess.Popen([os.path.join(build, "launcher/ddprun"), "--nnodes", str(NODES), "--rdzv-endpoint",
                                f"127.0.0.1:{port}", "--rdzv-id", "bench", "--rdzv-conf", "is_host=false",
                                "--nproc-per-node", "1", os.path.join(build, "tests/bin/test_worker"),
                                f"ready={ready}", f"waitfile={go}", "exit=0"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True) for _ in range(NODES)]
    deadline = time.monotonic() + 60
    while len(os.listdir(ready)) < NODES:
        if time.monotonic() > deadline:
            raise RuntimeError("workers never ready")
        time.sleep(0.002)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    seen = [read_until(a, b"the workers keep training", deadline, b"") for a in agents]
    time.sleep(down + random.random())  # a random phase against the back-off schedule
    restarted, t0 = server(build, port, env)
    resumed = []
    for a, s in zip(agents, seen):
        read_until(a, b"resumed round 0", t0 + 30, s)
        resumed.append(time.monotonic())
    with open(go, "w"):
        pass
    codes = [a.wait(timeout=60) for a in agents] + [restarted.wait(timeout=60)]
    if codes != [0] * (NODES + 1):
        raise RuntimeError(f"exit codes {codes}")
    return (max(resumed) - t0) * 1000


def main():
    global NODES
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    NODES = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    down = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
    with tempfile.TemporaryDirectory() as tmp:
        ms = sorted(one_run(build, tmp, down) for _ in range(runs))
    print(f"{NODES} agents, server down {down} s, {runs} runs: restart -> every agent resumed: median "
          f"{statistics.median(ms):.0f} ms, min {ms[0]:.0f}, p90 {ms[int(0.9 * (len(ms) - 1))]:.0f}, max {ms[-1]:.0f}")


NODES = 2
if __name__ == "__main__":
    main()
