#!/usr/bin/env python3
"""ddprun against torchrun 1.13 (c10d rendezvous) under srun, on the real 3-node SLURM test cluster of
tests/support/cluster.py (munged, slurmctld, 3 slurmd on this machine, proctrack/linuxproc; needs root).

  scripts/bench/slurm_failure.py [--build build] [--runs 5] [--cap 30]

failure   `srun -N3 --ntasks-per-node=1 LAUNCHER ... python3 worker.py`, one worker per node; when all three
          are up, rank 1 (on n2) writes the time and exits 1. Figure: that time → srun returned. torchrun:
          `/usr/bin/python3 -m torch.distributed.run --nnodes 3 --nproc_per_node 1 --rdzv_backend c10d
          --rdzv_endpoint n1:PORT --rdzv_id JOB --rdzv_conf is_host=(node 0) --monitor_interval 0.1` (srun starts it on each node); a run still going after --cap
          seconds is killed (scancel) and counted as "hung, >= cap".
scancel   the same job with every worker asleep; figure: scancel issued → no process of the job left (srun,
          slurmstepd, launcher, workers: every descendant of this script that is not a daemon).
Both launchers run the same Python worker; runs alternate launcher by launcher. Medians of --runs runs.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../tests/support"))
from cluster import SlurmCluster  # noqa: E402
# torchrun with its --redirects default parsed again under Python 3.11 (see python_vs_torchrun.py).
from python_vs_torchrun import TORCHRUN_311  # noqa: E402

WORKER = r'''
import os, sys, time
d = sys.argv[1]
rank = int(os.environ["RANK"])
open(os.path.join(d, "ready.%d" % rank), "w").close()
while len([f for f in os.listdir(d) if f.startswith("ready.")]) < 3:
    time.sleep(0.005)
if rank == 1 and sys.argv[2] == "fail":
    with open(os.path.join(d, "failed_at"), "w") as f:
        f.write(repr(time.time()))
    sys.exit(1)
time.sleep(3600)
'''


def launcher_args(kind, ddprun, port, job_tag):
    if kind == "ddprun":
        return [ddprun, "--nproc-per-node", "1", "--term-timeout", "5"]
    # torchrun 1.13 spells its options with underscores and runs the script with its own interpreter. Its c10d
    # backend guesses whether to host the store by comparing n1 with this machine's name, which fails here (all
    # nodes share one hostname): node 0 of the step says is_host=true, as a site's wrapper would.
    return ["sh", "-c", 'h=false; [ "$SLURM_NODEID" = 0 ] && h=true; exec /usr/bin/python3 -c "$TORCHRUN_311" '
            f'--nnodes 3 --monitor_interval 0.1 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint n1:{port} --rdzv_id {job_tag} '
            '--rdzv_conf is_host=$h --max_restarts 0 "$@"', "torchrun"]


def one_run(c, kind, mode, ddprun, cap, n):
    d = os.path.join(c.dir, f"{kind}-{mode}-{n}")
    os.mkdir(d)
    worker = os.path.join(d, "worker.py")
    with open(worker, "w") as f:
        f.write(WORKER)
    port = 29500 + n
    proc = c.popen("srun", "--partition=test", "-N3", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
                   *launcher_args(kind, ddprun, port, f"bench{n}"),
                   *(["/usr/bin/python3"] if kind == "ddprun" else []), worker, d, mode,
                   env=c.env(TORCHRUN_311=TORCHRUN_311, TMPDIR=d))  # torchrun's torchelastic_* dirs go with d
    deadline = time.monotonic() + 60
    while len([f for f in os.listdir(d) if f.startswith("ready.")]) < 3:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{kind}: workers never came up: {proc.communicate()}")
        time.sleep(0.005)
    result = None
    if mode == "fail":
        try:
            proc.wait(timeout=cap)
            with open(os.path.join(d, "failed_at")) as f:
                result = time.time() - float(f.read())
        except Exception:  # subprocess.TimeoutExpired: hung
            result = None
    else:
        time.sleep(0.3)
        jobs = c.run("squeue", "-h", "-o", "%i").out.split()
        t0 = time.monotonic()
        c.run("scancel", *jobs)
        while c.leftovers():
            if time.monotonic() - t0 > cap:
                break
            time.sleep(0.002)
        result = time.monotonic() - t0 if not c.leftovers() else None
    # Whatever is left (a hung torchrun) goes, and the next run starts on an idle cluster.
    c.run("scancel", "--partition=test")
    proc.communicate()
    c.kill_job_processes()
    c.wait_idle(timeout=60)
    return result


def summary(values, cap):
    done = [v for v in values if v is not None]
    hung = len(values) - len(done)
    if not done:
        return f"all {hung} hung (>= {cap} s)"
    text = f"median {statistics.median(done) * 1000:.0f} ms (min {min(done) * 1000:.0f}, max {max(done) * 1000:.0f})"
    return text + (f"; {hung} of {len(values)} hung (>= {cap} s)" if hung else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cap", type=float, default=30)
    a = ap.parse_args()
    ddprun = os.path.abspath(os.path.join(a.build, "launcher/ddprun"))
    results = {(k, m): [] for k in ("ddprun", "torchrun") for m in ("fail", "scancel")}
    n = 0
    with SlurmCluster(nodes=3) as c:
        for _ in range(a.runs):
            for mode in ("fail", "scancel"):
                for kind in ("ddprun", "torchrun"):
                    n += 1
                    r = one_run(c, kind, mode, ddprun, a.cap, n)
                    results[(kind, mode)].append(r)
                    print(f"{kind:8s} {mode:7s} run {n}: {'hung' if r is None else f'{r * 1000:.0f} ms'}", flush=True)
    for mode, what in (("fail", "rank failure -> srun returned"), ("scancel", "scancel -> nothing of the job left")):
        print(f"{what}:")
        for kind in ("ddprun", "torchrun"):
            print(f"  {kind:8s} {summary(results[(kind, mode)], a.cap)}")
        d = [v for v in results[("ddprun", mode)] if v is not None]
        t = [v for v in results[("torchrun", mode)] if v is not None]
        if d and t:
            print(f"  torchrun / ddprun (medians): {statistics.median(t) / statistics.median(d):.1f}x")


if __name__ == "__main__":
    main()
