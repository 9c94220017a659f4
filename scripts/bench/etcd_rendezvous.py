#!/usr/bin/env python3
"""Meeting in etcd (issue 36): N ddprun agents on this machine (1 worker each, /bin/true) meet through a real etcd
(Debian's etcd-server; one member, then a cluster of three, on loopback) and, in the same run, through ddprun's
built-in server (--rdzv-endpoint 127.0.0.1:PORT, the first agent to bind it hosts). Measured: from the first agent
started to the last agent exited, every exit 0 checked; median and range over RUNS, alternating etcd and built-in.
Then etcd's write rate while a 2-node job trains (workers sleep STEADY s), on a fresh member: etcd's own counter of
committed Raft proposals (its /metrics, etcd_server_proposals_committed_total) before and after, per second. Then
the takeover: 3 agents (--nnodes 2:3), the elected host SIGKILLed once every worker runs: time until both other
agents run their workers again in the re-formed round. Then an etcd leader's loss: on a fresh 3-member cluster the
leader is SIGKILLed and a 2-node job started at once, the dead member's URL first. Last, the peer, where torch 1.13
and python3-etcd are there: its torchrun on the same member (etcd's v2 API enabled for it), the same jobs, and the
same node loss.

usage: etcd_rendezvous.py BUILD_DIR [RUNS] [SIZES] [STEADY]     e.g. etcd_rendezvous.py build 5 2,16,64 20
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from etcd_cluster import EtcdCluster, skip_unless_etcd  # noqa: E402
from ports import free_port  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SIZES = [int(n) for n in (sys.argv[3] if len(sys.argv) > 3 else "2,16,64").split(",")]
STEADY = float(sys.argv[4]) if len(sys.argv) > 4 else 20
DDPRUN = os.path.abspath(os.path.join(BUILD, "launcher/ddprun"))


def job(n, rdzv_args, program=("/bin/true",), env=None):
    """Starts n agents at once; returns (ms from the first start to the last exit, exit codes)."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([DDPRUN, "--nnodes", str(n), "--nproc-per-node", "1", "--local-addr", "127.0.0.1",
                               "--rdzv-timeout", "60", *rdzv_args, *program],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
             for _ in range(n)]
    codes, errs = [], []
    for p in procs:
        _, err = p.communicate(timeout=120)
        codes.append(p.returncode)
        errs.append(err)
    ms = (time.monotonic() - t0) * 1000
    if any(codes):
        bad = codes.index(next(c for c in codes if c))
        raise RuntimeError(f"exit codes {codes}; agent {bad}: {errs[bad][-1500:].decode(errors='replace')}")
    return ms, codes


TORCHRUN = ["/usr/bin/python3",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/peers/torchrun311.py")]
TORCHRUN_RUNS = int(os.environ.get("TORCHRUN_RUNS", "3"))


def torchrun_available():
    return os.path.exists(TORCHRUN[0]) and os.path.exists(TORCHRUN[1]) and subprocess.run(
        [TORCHRUN[0], "-c", "import torch.distributed.elastic.rendezvous.etcd_rendezvous, etcd"],
        capture_output=True).returncode == 0


def torchrun_job(n, cluster, run_id):
    """torch 1.13's torchrun, n agents on etcd (its v2 API, python3-etcd): ms from the first start to the last exit."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([*TORCHRUN, f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=etcd",
                               f"--rdzv_endpoint={cluster.endpoints}", f"--rdzv_id={run_id}",
                               "--monitor_interval=0.1", "--no_python", "/bin/true"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
             for _ in range(n)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"torchrun exit codes {[p.returncode for p in procs]}: {errs[0][-1500:]!r}")
    return (time.monotonic() - t0) * 1000


class Agents:
    """Launcher processes whose stderr is read as it comes; ended (the given signal to each group) on leaving."""

    def __init__(self, argv, count, env=None, end_signal=signal.SIGKILL):
        self.procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                       start_new_session=True) for _ in range(count)]
        self.seen = {p.pid: b"" for p in self.procs}
        self.end_signal = end_signal

    def said(self, p, needle):
        """How often `p` has said `needle` so far."""
        os.set_blocking(p.stderr.fileno(), False)
        self.seen[p.pid] += p.stderr.read() or b""
        return self.seen[p.pid].count(needle)

    def wait(self, procs, needle, times, limit):
        """Until each of `procs` said `needle` `times` times: True, or False after `limit` s."""
        deadline = time.monotonic() + limit
        while not all(self.said(p, needle) >= times for p in procs):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def tails(self):
        return " | ".join(v[-600:].decode(errors="replace") for v in self.seen.values())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            try:
                os.killpg(p.pid, self.end_signal)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.wait()


def torchrun_after_a_node_loss(cluster, run_id, wait_s=30):
    """3 torchrun agents (--nnodes 2:3, --max_restarts 3) with sleeping workers; one agent SIGKILLed once all run:
    whether the other two re-form (complete a second rendezvous round) within wait_s, and when."""
    done = b"is complete. Final state"  # torch 1.13 logs each rendezvous round it completes
    with Agents([*TORCHRUN, "--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=etcd",
                 f"--rdzv_endpoint={cluster.endpoints}", f"--rdzv_id={run_id}", "--max_restarts=3",
                 "--monitor_interval=0.1", "--no_python", "sleep", "120"], 3) as agents:
        if not agents.wait(agents.procs, done, 1, 120):
            raise RuntimeError("torchrun never started: " + agents.tails())
        time.sleep(1)  # every worker up
        t0 = time.monotonic()
        os.killpg(agents.procs[0].pid, signal.SIGKILL)
        return (time.monotonic() - t0) * 1000 if agents.wait(agents.procs[1:], done, 2, wait_s) else None


def takeover_ms(cluster, env, run_id):
    """3 agents, --nnodes 2:3, 1 worker each (sleep); the elected host SIGKILLed once all run: ms until both others
    have started their workers again in the re-formed round."""
    started = b"started 1 worker"
    with Agents([DDPRUN, "--nnodes", "2:3", "--nproc-per-node", "1", "--local-addr", "127.0.0.1", "--rdzv-backend",
                 "etcd", "--rdzv-endpoint", cluster.endpoints, "--rdzv-id", run_id, "--heartbeat-interval", "0.2",
                 "--heartbeat-timeout", "1", "sleep", "120"], 3, env=env, end_signal=signal.SIGTERM) as agents:
        if not agents.wait(agents.procs, started, 1, 30):
            raise RuntimeError("takeover: never started: " + agents.tails())
        host = json.loads(cluster.value(f"/ddprun/{run_id}/coordinator"))["pid"]
        t0 = time.monotonic()
        os.kill(host, signal.SIGKILL)
        if not agents.wait([p for p in agents.procs if p.pid != host], started, 2, 60):
            raise RuntimeError("takeover: timed out: " + agents.tails())
        return (time.monotonic() - t0) * 1000


def leader_loss_ms(tmp, env, run):
    """A fresh 3-member cluster; its leader SIGKILLed, then at once a 2-node job started with the dead leader's URL
    first in its endpoint list: (ms from the kill to the job's last exit, the same job's ms on the healthy cluster
    just before). The difference is what an etcd leader's loss costs a job that meets then: the remaining members'
    election, and each agent's one wait (2 s) for the member that no longer answers."""
    cluster = EtcdCluster(os.path.join(tmp, f"leader{run}"), 3)
    os.mkdir(cluster.base_dir)
    try:
        cluster.start()
        healthy = job(2, ["--rdzv-backend", "etcd", "--rdzv-endpoint", cluster.endpoints, "--rdzv-id",
                          f"healthy-{run}"], env=env)[0]
        dead = cluster.leader()
        urls = cluster.endpoints.split(",")
        endpoints = ",".join([urls[dead]] + [u for i, u in enumerate(urls) if i != dead])
        t0 = time.monotonic()
        cluster.kill(dead)
        job(2, ["--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints, "--rdzv-id", f"lost-{run}"], env=env)
        return (time.monotonic() - t0) * 1000, healthy
    finally:
        cluster.stop()


def committed(cluster):
    total = 0
    for i, p in enumerate(cluster.procs):
        if p and p.poll() is None:
            with urllib.request.urlopen(cluster.url(i) + "/metrics", timeout=3) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("etcd_server_proposals_committed_total "):
                        total = max(total, float(line.split()[1]))  # every member commits the same entries
    return total


def fmt(values):
    return f"{statistics.median(values):.1f} ms ({min(values):.1f}-{max(values):.1f})"


def main():
    try:
        skip_unless_etcd()
    except Exception as e:  # unittest.SkipTest
        print(f"etcd_rendezvous: {e}")
        return 77
    env = dict(os.environ, DDPRUN_TOKEN="bench-token")
    load = open("/proc/loadavg").read().split()[:3]
    print(f"machine: {os.cpu_count()} cores; load {' '.join(load)}; {time.strftime('%F %T UTC', time.gmtime())}")
    print(f"ddprun {DDPRUN}; {RUNS} runs per cell, etcd and built-in alternating; agents 1 worker each, /bin/true\n")
    print("| etcd members | nodes | through etcd: first start -> last exit | built-in server, same run | etcd / built-in |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ddprun_etcd_bench_") as tmp:
        for members in (1, 3):
            cluster = EtcdCluster(os.path.join(tmp, f"c{members}"), members)
            os.mkdir(cluster.base_dir)
            try:
                cluster.start()
                for n in SIZES:
                    via_etcd, built_in = [], []
                    for r in range(RUNS):
                        run_id = f"bench-{members}-{n}-{r}"
                        via_etcd.append(job(n, ["--rdzv-backend", "etcd", "--rdzv-endpoint", cluster.endpoints,
                                                "--rdzv-id", run_id], env=env)[0])
                        built_in.append(job(n, ["--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", run_id],
                                            env=env)[0])
                    ratio = statistics.median(via_etcd) / statistics.median(built_in)
                    print(f"| {members} | {n} | {fmt(via_etcd)} | {fmt(built_in)} | {ratio:.2f}x |", flush=True)
            finally:
                cluster.stop()
        # A fresh member of its own, so that nothing of the runs above (a lease running out) is counted.
        cluster = EtcdCluster(os.path.join(tmp, "steady"), 1)
        os.mkdir(cluster.base_dir)
        try:
            cluster.start()
            before, t0 = committed(cluster), time.monotonic()
            job(2, ["--rdzv-backend", "etcd", "--rdzv-endpoint", cluster.endpoints, "--rdzv-id", "steady"],
                program=("sleep", str(STEADY)), env=env)
            after, secs = committed(cluster), time.monotonic() - t0
            takeovers = [takeover_ms(cluster, env, f"takeover-{r}") for r in range(RUNS)]
        finally:
            cluster.stop()
        leader_losses = [leader_loss_ms(tmp, env, r) for r in range(RUNS)]
        # The peer, torch 1.13's torchrun: its etcd back-end speaks etcd's v2 API, enabled on a member of its own
        # (v2 adds etcd's own writes, a SYNC proposal every 500 ms, which the count above must not see).
        cluster = EtcdCluster(os.path.join(tmp, "peer"), 1, v2=True)
        os.mkdir(cluster.base_dir)
        peer = []
        peer_loss = "not measured: torch 1.13 with python3-etcd not found"
        try:
            cluster.start()
            if torchrun_available():
                for n in [n for n in SIZES if n <= 16]:
                    ours = [job(n, ["--rdzv-backend", "etcd", "--rdzv-endpoint", cluster.endpoints, "--rdzv-id",
                                    f"peer-ddprun-{n}-{r}"], env=env)[0] for r in range(TORCHRUN_RUNS)]
                    theirs = [torchrun_job(n, cluster, f"peer-torchrun-{n}-{r}") for r in range(TORCHRUN_RUNS)]
                    peer.append(f"| {n} | {fmt(ours)} | {fmt(theirs)} | "
                                f"{statistics.median(theirs) / statistics.median(ours):.1f}x |")
                lost = torchrun_after_a_node_loss(cluster, "peer-torchrun-loss")
                peer_loss = f"re-formed in {lost:.0f} ms" if lost else "not re-formed 30 s after the kill"
        finally:
            cluster.stop()
    print(f"\netcd writes while a 2-node job ran {secs:.1f} s (1 member, fresh): {after - before:.0f} committed "
          f"proposals in all, {(after - before) / secs:.2f} per s (the election, the round kept, the end's "
          f"clean-up: a number per job, not per step; a keep-alive is not a proposal)")
    print(f"the elected host SIGKILLed while a 2:3 job runs -> both other nodes running the re-formed round: "
          f"{fmt(takeovers)} over {RUNS} runs (the lease is 10 s)")
    print(f"an etcd leader SIGKILLed, then a 2-node job started with its URL first: {fmt([a for a, _ in leader_losses])} "
          f"from the kill to the job's end; the same job on the healthy cluster just before: "
          f"{fmt([b for _, b in leader_losses])} ({RUNS} fresh 3-member clusters)")
    if peer:
        print(f"\nthe peer on the same etcd member (v2 API), {TORCHRUN_RUNS} runs each, in blocks:")
        print("| nodes | ddprun | torchrun 1.13 (--monitor_interval 0.1) | torchrun / ddprun |\n|---|---|---|---|")
        print("\n".join(peer))
    print(f"torchrun 1.13, 3 agents --nnodes 2:3 --max_restarts 3, one SIGKILLed: {peer_loss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
