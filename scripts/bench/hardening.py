#!/usr/bin/env python3
"""Hardening figures (docs/BENCHMARKS.md, "Hardening"):

1. signal -> exit while waiting for the other nodes: a static 2-node job of which only one node runs. The
   host (node 0, hosting the rendezvous) waits for node 1; a joiner (node 1) waits for a host that already
   holds the other place of a 3-node job. SIGTERM (or SIGINT) is sent once the agent is waiting; the time is
   from kill() to waitpid() returning in this script. Peer in the same run: torchrun 1.13 (static rendezvous,
   node 0 waiting for node 1), with the same signal.
2. survivors 1 s after SIGKILL of ddprun: 8 workers, each with 3 kinds of grandchildren (two in its process
   group like DataLoader workers, one setsid child, one double-forked daemon that ignores SIGTERM); every
   pid is recorded; ddprun is SIGKILLed and, 1 s later, the live (non-zombie) ones are counted.

usage: hardening.py BUILD_DIR [RUNS_SIGNAL=20] [RUNS_SIGKILL=50]
"""
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TORCHRUN = ["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "../../../shared/peers/torchrun311.py")]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from ports import free_port  # noqa: E402


def port_listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rindex(b")") + 2:].split()[0] != b"Z"


def reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def wait_until(cond, timeout=20):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting")
        time.sleep(0.005)


CAP_S = 10  # a process still there after this long is recorded as "did not exit" (then SIGKILLed)


def signal_to_exit(proc, sig):
    t0 = time.perf_counter()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=CAP_S)
    except subprocess.TimeoutExpired:
        return float("inf"), "none"
    return (time.perf_counter() - t0) * 1000, proc.returncode


def ddprun_waiting(build, role, sig, env):
    ddprun = os.path.join(build, "launcher/ddprun")
    port = free_port()
    common = ["-q", "--master-addr", "127.0.0.1", "--rdzv-port", str(port), "--nproc-per-node", "1"]
    if role == "host":
        proc = subprocess.Popen([ddprun, "--nnodes", "2", "--node-rank", "0", *common, "/bin/true"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: port_listening(port))
        ms, code = signal_to_exit(proc, sig)
        return ms, code
    host = subprocess.Popen([ddprun, "--nnodes", "3", "--node-rank", "0", *common, "/bin/true"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: port_listening(port))
    joiner = subprocess.Popen([ddprun, "--nnodes", "3", "--node-rank", "1", *common, "/bin/true"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.2)  # loopback join: milliseconds; the joiner is now waiting for node 2
    ms, code = signal_to_exit(joiner, sig)
    host.send_signal(signal.SIGTERM)
    host.wait(timeout=30)
    return ms, code


def torchrun_waiting(sig):
    port = free_port()
    proc = subprocess.Popen([*TORCHRUN, "--nnodes", "2", "--node_rank", "0", "--master_addr", "127.0.0.1",
                             "--master_port", str(port), "--nproc_per_node", "1", "--no_python", "/bin/true"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: port_listening(port), timeout=60)
    time.sleep(0.3)  # the agent is now in its rendezvous barrier
    ms, code = signal_to_exit(proc, sig)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return ms, code


def survivors_after_sigkill(build, tmp):
    ddprun = os.path.join(build, "launcher/ddprun")
    worker = os.path.join(build, "tests/bin/test_worker")
    pids_file = os.path.join(tmp, "pids")
    ready = os.path.join(tmp, "ready")
    os.makedirs(ready, exist_ok=True)
    for f in os.listdir(ready):
        os.unlink(os.path.join(ready, f))
    if os.path.exists(pids_file):
        os.unlink(pids_file)
    env = dict(os.environ, TMPDIR=tmp)
    proc = subprocess.Popen([ddprun, "-q", "--nproc-per-node", "8", worker, f"pidfile={pids_file}", "fork=group:2",
                             "fork=setsid", "fork=daemon", f"ready={ready}", "hang"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait_until(lambda: len([f for f in os.listdir(ready) if not f.endswith(".tmp")]) >= 8)
    with open(pids_file) as f:
        pids = [int(line.split()[1]) for line in f]
    proc.kill()
    proc.wait()
    time.sleep(1.0)
    reap()
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    leftover_dirs = [d for d in os.listdir(tmp) if d.startswith("ddprun-")]
    return len(pids), len(left), len(leftover_dirs)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    runs_signal = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    runs_kill = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    # The script reaps whatever SIGKILLed ddprun leaves (the guard, re-parented orphans) itself.
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    env = dict(os.environ, DDPRUN_TOKEN="bench")
    print("| who | role | signal | runs | exit code | signal -> exit, median | p90 | max |")
    print("|---|---|---|---|---|---|---|---|")
    for sig in (signal.SIGTERM, signal.SIGINT):
        for who, role in (("ddprun", "host"), ("ddprun", "joiner"), ("torchrun 1.13", "host")):
            times, codes = [], set()
            for _ in range(runs_signal if who == "ddprun" else max(3, runs_signal // 4)):
                ms, code = ddprun_waiting(build, role, sig, env) if who == "ddprun" else torchrun_waiting(sig)
                times.append(ms)
                codes.add(code)
            times.sort()
            p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
            show = lambda ms: f"> {CAP_S} s (no exit)" if ms == float("inf") else f"{ms:.1f} ms"
            print(f"| {who} | {role} | {sig.name} | {len(times)} | {sorted(map(str, codes))} | "
                  f"{show(statistics.median(times))} | {show(p90)} | {show(max(times))} |", flush=True)
    print()
    with tempfile.TemporaryDirectory(prefix="ddprun_hardening_") as tmp:
        total = left = dirs = 0
        for _ in range(runs_kill):
            n, l, d = survivors_after_sigkill(build, tmp)
            total, left, dirs = total + n, left + l, dirs + d
    print(f"SIGKILL of ddprun, 8 workers x (2 group + 1 setsid + 1 daemon ignoring SIGTERM) grandchildren: "
          f"{runs_kill} runs, {total} processes, {left} alive 1 s later, {dirs} run directories left")


if __name__ == "__main__":
    main()
