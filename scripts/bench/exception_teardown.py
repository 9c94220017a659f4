#!/usr/bin/env python3
"""A Python exception in a DDP job: from the raise to every process gone (issue 35's error-file fast path).

gloo DDP over a small linear model; rank FAIL_RANK raises at step 50, under torch's @record (which writes
TORCHELASTIC_ERROR_FILE before the interpreter's slow exit). The raising rank stamps the wall clock just
before it raises; "all gone" is when the launchers have exited and no process they started is left (this
script is a child subreaper, so whatever a launcher leaves behind is re-parented to it and counted).

Cases: one node of 4 ranks (rank 2 raises), and two nodes of 2 ranks on loopback (rank 1, on node 0, raises).
Launchers: ddprun (this build) and torchrun 1.13 (Debian's python3-torch; the peer, with its Python 3.11 fix from
../shared/peers), interleaved run by run; each run records the load average beside it.

usage: scripts/bench/exception_teardown.py [BUILD_DIR] [--runs N] [--no-torchrun]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
PYTHON = "/usr/bin/python3"  # Debian's python3-torch is installed for this interpreter
sys.path.insert(0, os.path.join(ROOT, "tests/support"))
from harness import descendants, reap_zombies  # noqa: E402  (importing it makes this process a subreaper)
from ports import free_port  # noqa: E402

TRAIN = """
import os, sys, time, torch, torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1000):
        if rank == int(os.environ["FAIL_RANK"]) and step == 50:
            with open(os.environ["MARK"], "w") as f:
                f.write(repr(time.time()))
            raise RuntimeError(f"planned failure at step {step}")
        loss = model(torch.randn(16, 8)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
main()
"""


def peer_torchrun():
    peers = os.environ.get("DDPRUN_PEERS", os.path.join(ROOT, "../shared/peers"))
    path = os.path.join(peers, "torchrun311.py")
    if not os.path.exists(path):
        sys.exit(f"exception_teardown: no {path} (set DDPRUN_PEERS to the peers' folder, or --no-torchrun)")
    return [PYTHON, path]


def commands(launcher, build, script, nnodes, nproc, port):
    """One command line per node."""
    lines = []
    for node in range(nnodes):
        if launcher == "ddprun":
            cmd = [os.path.join(build, "launcher/ddprun"), "-q", "--nproc-per-node", str(nproc)]
            if nnodes == 1:
                cmd += ["--standalone"]
            else:
                cmd += ["--nnodes", str(nnodes), "--node-rank", str(node), "--master-addr", "127.0.0.1",
                        "--rdzv-port", str(port)]
            lines.append(cmd + [script])
        else:
            cmd = peer_torchrun() + ["--nproc_per_node", str(nproc), "--monitor_interval", "0.1"]
            if nnodes == 1:
                cmd += ["--standalone"]
            else:
                cmd += ["--nnodes", str(nnodes), "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
                        "--rdzv_id", "bench"]
            lines.append(cmd + [script])
    return lines


def one_run(launcher, build, tmp, nnodes, nproc, fail_rank):
    mark = os.path.join(tmp, "raised_at")
    if os.path.exists(mark):
        os.remove(mark)
    script = os.path.join(tmp, "train.py")
    env = dict(os.environ, PYTHON_EXEC=PYTHON, TMPDIR=tmp, OMP_NUM_THREADS="1", FAIL_RANK=str(fail_rank),
               MARK=mark, DDPRUN_TOKEN="bench")
    port = free_port()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for c in commands(launcher, build, script, nnodes, nproc, port)]
    codes = [p.wait(timeout=300) for p in procs]
    deadline = time.monotonic() + 60
    while True:  # the launchers are gone; now every process they started must be
        reap_zombies()
        if not descendants():
            gone = time.time()
            break
        if time.monotonic() > deadline:
            sys.exit(f"{launcher}: processes left 60 s after the launchers exited")
        time.sleep(0.001)
    if not os.path.exists(mark) or 0 in codes:
        sys.exit(f"{launcher}: the job did not fail as planned (exit codes {codes})")
    with open(mark) as f:
        return (gone - float(f.read())) * 1000, codes


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--no-torchrun", action="store_true")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="ddprun_exc_bench_")
    with open(os.path.join(tmp, "train.py"), "w") as f:
        f.write(TRAIN)
    launchers = ["ddprun"] + ([] if args.no_torchrun else ["torchrun 1.13"])
    cases = [("1 node x 4 ranks, rank 2 raises", 1, 4, 2), ("2 nodes x 2 ranks, rank 1 raises", 2, 2, 1)]
    results, loads = {}, []
    print(f"# {os.uname().nodename}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average at start {os.getloadavg()}", flush=True)
    try:
        for i in range(args.runs):
            for case, nnodes, nproc, fail in cases:
                for launcher in launchers:
                    loads.append(os.getloadavg()[0])
                    ms, codes = one_run("ddprun" if launcher == "ddprun" else "torchrun", args.build, tmp, nnodes,
                                        nproc, fail)
                    results.setdefault((case, launcher), []).append((ms, codes))
                    print(f"{case:34s} {launcher:14s} run {i}: {ms:7.0f} ms, exit {codes} (load {loads[-1]:.1f})",
                          flush=True)
    finally:
        subprocess.run(["rm", "-rf", tmp])
    print(f"\nload average (1 min) during the runs: median {statistics.median(loads):.1f}, "
          f"min {min(loads):.1f}, max {max(loads):.1f}\n")
    print(f"| case | launcher | raise → all gone, median of {args.runs} (range) | exit codes | vs ddprun |")
    print("|---|---|---|---|---|")
    for case, *_ in cases:
        base = statistics.median(ms for ms, _ in results[(case, "ddprun")])
        for launcher in launchers:
            runs = results[(case, launcher)]
            times = [ms for ms, _ in runs]
            med = statistics.median(times)
            codes = sorted({tuple(c) for _, c in runs})
            print(f"| {case} | {launcher} | {med:.0f} ms ({min(times):.0f}–{max(times):.0f}) | "
                  f"{', '.join(map(str, codes))} | {med / base:.1f}× |")


if __name__ == "__main__":
    main()
