#!/usr/bin/python3
"""Faults on the wire, ddprun and torchrun 1.13 side by side (issue 37's table in docs/MULTINODE.md).

The lab (tests/support/netns_lab.py): four hosts in network namespaces on one switch, each with a host name
of its own (a UTS namespace, names in /etc/netns/NS/hosts): "rdzv" runs the rendezvous (ddprun-rendezvous, or a
torch TCPStore that torchrun's c10d backend joins with is_host=false), "node0".."node2" each run one launcher
with one worker. rdzv and node1 reach the switch through delay lines of our own (no netem here). The worker is
scripts/bench/net_faults_worker.py, the same for both: Python DDP on Fashion-MNIST with gloo for --train seconds.
Both launchers run with their defaults (ddprun: heartbeat timeout 15 s, reconnect timeout 60 s; torchrun 1.13:
monitor interval 5 s, c10d read timeout 60 s; gloo's own timeout 30 min).

Each scenario's fault starts once every rank has done its first step (or before the launch, for the rendezvous
path and loss). A run ends when every launcher exited, or --cap seconds after the fault (then the launchers still
running are reported and killed). Reported per launcher: each node's exit code and when it exited (seconds after
the fault, or after the launch when the fault came first), the server's code, and processes left in the hosts'
namespaces after their launcher exited.

usage: scripts/bench/network_faults.py [--runs N] [--only NAME,...] [--launchers ddprun,torchrun] [--train S]
                                       [--cap S] [--logs DIR]      (root: it makes namespaces)
env: DDPRUN, RENDEZVOUS (default build/launcher/ddprun, build/rendezvous/ddprun-rendezvous)."""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
sys.path.insert(0, os.path.join(ROOT, "tests/support"))
from netns_lab import NetnsStar, sh  # noqa: E402
from ports import free_port  # noqa: E402

DDPRUN = os.path.abspath(os.environ.get("DDPRUN", os.path.join(ROOT, "build/launcher/ddprun")))
RENDEZVOUS = os.path.abspath(os.environ.get("RENDEZVOUS", os.path.join(ROOT, "build/rendezvous/ddprun-rendezvous")))
TORCHRUN = os.path.abspath(os.path.join(ROOT, "../shared/peers/torchrun311.py"))
PYTHON = "/usr/bin/python3"  # Debian's, the one with python3-torch
WORKER = os.path.join(HERE, "net_faults_worker.py")
RDZV, NODES = 0, (1, 2, 3)  # lab hosts; node rank = host - 1
NAMES = ["rdzv", "node0", "node1", "node2"]
CUT_NODE = 2  # node1
STORE = ("import datetime, sys, time, torch.distributed as d\n"
         "s = d.TCPStore('0.0.0.0', int(sys.argv[1]), None, True, datetime.timedelta(seconds=600),"
         " wait_for_workers=False)\n"
         "print('listening', flush=True)\n"
         "time.sleep(10 ** 6)\n")


def pause(lab, seconds):
    time.sleep(seconds)


def power_off(lab, host):
    lab.cut(host)
    kill_host(lab, host)


# name: (what, before the launch, the fault once every rank trained a step)
SCENARIOS = {
    "none": ("no fault", None, None),
    "loss10": ("10% of node1's frames lost each way, the whole run", lambda lab: lab.lose(CUT_NODE, 10), None),
    "loss30": ("30% of node1's frames lost each way, the whole run", lambda lab: lab.lose(CUT_NODE, 30), None),
    "rdzv-delay": ("2.5 s each way on the rendezvous host's link, the whole run",
                   lambda lab: lab.delay(RDZV, 2500), None),
    "run-delay": ("6 s each way on node1's link for 20 s while training", None,
                  lambda lab: (lab.delay(CUT_NODE, 6000), pause(lab, 20), lab.delay(CUT_NODE, 0))),
    "node-cut": ("node1's link cut for 25 s while training", None,
                 lambda lab: (lab.cut(CUT_NODE), pause(lab, 25), lab.heal(CUT_NODE))),
    "rdzv-cut": ("the rendezvous host's link cut for 25 s while training", None,
                 lambda lab: (lab.cut(RDZV), pause(lab, 25), lab.heal(RDZV))),
    "power-off": ("node1 powered off while training (its processes SIGKILLed, its link down for good)", None,
                  lambda lab: power_off(lab, CUT_NODE)),
}


def host_pids(lab, host):
    out = sh("ip", "netns", "pids", lab.ns[host], check=False).stdout.decode().split()
    return [int(p) for p in out]


def kill_host(lab, host):
    for pid in host_pids(lab, host):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def named(lab, host, cmd):
    """`cmd` on lab host `host`, under its own host name."""
    return [*lab.inside(host), "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', NAMES[host], *cmd]


def commands(launcher, port, ready, train):
    program = [WORKER, "--seconds", str(train), "--ready", ready]
    if launcher == "ddprun":
        server = [RENDEZVOUS, "--rdzv-id", "faults", "--nnodes", "3", "--port", str(port)]
        agent = [DDPRUN, "--nnodes", "3", "--nproc-per-node", "1", "--rdzv-endpoint", f"rdzv:{port}", "--rdzv-id",
                 "faults", "--rdzv-conf", "is_host=false", *program]
    else:
        server = [PYTHON, "-c", STORE, str(port)]
        agent = [PYTHON, TORCHRUN, "--nnodes", "3", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                 "--rdzv_endpoint", f"rdzv:{port}", "--rdzv_id", "faults", "--rdzv_conf", "is_host=false",
                 *program]
    return server, agent


def one_run(lab, launcher, scenario, run, args, logs):
    what, before, fault = SCENARIOS[scenario]
    env = dict(os.environ, DDPRUN_TOKEN="faults-bench", PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="ddprun_faults_") as tmp:
        ready = os.path.join(tmp, "ready")
        os.mkdir(ready)
        port = free_port()
        server_cmd, agent_cmd = commands(launcher, port, ready, args.train)
        files, procs = [], {}
        def start(host, cmd):
            log = open(os.path.join(logs, f"{scenario}.{launcher}.{run}.{NAMES[host]}.log"), "wb")
            files.append(log)
            procs[host] = subprocess.Popen(named(lab, host, cmd), env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
        try:
            if before:
                before(lab)
            start(RDZV, server_cmd)
            time.sleep(2)  # the server listening (a TCPStore has no line to wait for on a pipe we keep)
            t0 = time.monotonic()
            for h in NODES:
                start(h, agent_cmd)
            ended = {}
            def poll():
                for h in NODES:
                    if h not in ended and procs[h].poll() is not None:
                        ended[h] = (procs[h].returncode, time.monotonic(), len(host_pids(lab, h)))
            deadline = t0 + args.cap
            trained = False
            while len(ended) < len(NODES) and time.monotonic() < deadline:
                poll()
                if len(os.listdir(ready)) == len(NODES):
                    trained = True
                    break
                time.sleep(0.05)
            t_fault, faulting = t0, None
            if trained and fault:  # in a thread: exits during a 25 s cut are timed as they happen
                t_fault = time.monotonic()
                faulting = threading.Thread(target=fault, args=(lab,))
                faulting.start()
            while len(ended) < len(NODES) and time.monotonic() < t_fault + args.cap:
                poll()
                time.sleep(0.05)
            poll()
            if faulting:
                faulting.join()
            row = []
            for h in NODES:
                if h in ended:
                    code, at, left = ended[h]
                    powered_off = scenario == "power-off" and h == CUT_NODE
                    row.append("powered off" if powered_off else
                               f"{code} @{at - t_fault:.1f}s" + (f" ({left} left)" if left else ""))
                else:
                    row.append(f"running @{args.cap:.0f}s")
            srv = procs[RDZV].poll()
            if launcher == "ddprun":
                try:
                    # It may wait its reconnect timeout (60 s) for a node judged lost for its silence.
                    srv = procs[RDZV].wait(timeout=max(1, 90 + t_fault - time.monotonic()))
                except subprocess.TimeoutExpired:
                    srv = None
            return {"trained": trained, "nodes": row, "server": srv}
        finally:
            for p in procs.values():
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
            for h in range(len(NAMES)):
                kill_host(lab, h)
            for f in files:
                f.close()
            for h in range(len(NAMES)):
                lab.heal(h)
            for h in (RDZV, CUT_NODE):
                lab.delay(h, 0)
            lab.lossless()


def main():
    if os.geteuid() != 0:
        raise SystemExit("network_faults.py: must run as root (it makes network namespaces)")
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--only", default=",".join(SCENARIOS))
    p.add_argument("--launchers", default="ddprun,torchrun")
    p.add_argument("--train", type=float, default=40)
    p.add_argument("--cap", type=float, default=150)
    p.add_argument("--logs", default=tempfile.mkdtemp(prefix="network_faults_logs_"))
    args = p.parse_args()
    os.makedirs(args.logs, exist_ok=True)
    lab = NetnsStar(f"nf{os.getpid() % 100000}", 4, delayed=(RDZV, CUT_NODE))
    try:
        for h, ns in enumerate(lab.ns):
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for a, n in zip(lab.addr, NAMES)))
        print(f"logs: {args.logs}", flush=True)
        print("| scenario | launcher | run | node0 | node1 | node2 | server |")
        print("|---|---|---|---|---|---|---|")
        for scenario in args.only.split(","):
            for run in range(args.runs):
                for launcher in args.launchers.split(","):
                    r = one_run(lab, launcher, scenario, run + 1, args, args.logs)
                    nodes = r["nodes"] if r["trained"] else [f"{n} (never trained)" for n in r["nodes"]]
                    print(f"| {scenario} | {launcher} | {run + 1} | " + " | ".join(nodes) + f" | {r['server']} |",
                          flush=True)
    finally:
        for ns in lab.ns:
            sh("rm", "-rf", f"/etc/netns/{ns}", check=False)
        lab.remove()


if __name__ == "__main__":
    main()
