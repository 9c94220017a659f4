#!/usr/bin/env python3
"""Meeting in etcd (issue 36): N ddprun agents on this machine (1 worker each, /bin/true) meet through a real etcd
(Debian's etcd-server; one member, then a cluster of three, on loopback) and, in the same run, through ddprun's
built-in server (--rdzv-endpoint 127.0.0.1:PORT, the first agent to bind it hosts). Measured: from the first agent
started to the last agent exited, every exit 0 checked; median and range over RUNS, alternating etcd and built-in.
Then etcd's write rate while a 2-node job trains (workers sleep STEADY s), on a fresh member: etcd's own counter of
committed Raft proposals (its /metrics, etcd_server_proposals_committed_total) before and after, per second.

usage: etcd_rendezvous.py BUILD_DIR [RUNS] [SIZES] [STEADY]     e.g. etcd_rendezvous.py build 5 2,16,64 20
"""
import os
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
        finally:
            cluster.stop()
    print(f"\netcd writes while a 2-node job ran {secs:.1f} s (1 member, fresh): {after - before:.0f} committed "
          f"proposals in all, {(after - before) / secs:.2f} per s (the host's lease and claim, the revoke; a "
          f"keep-alive is not a proposal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
