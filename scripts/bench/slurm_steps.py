#!/usr/bin/env python3
"""Issue 18's figures on the real 3-node SLURM test cluster of tests/support/cluster.py (needs root):

  scripts/bench/slurm_steps.py [--build build] [--ddprun PATH] [--sweeps 20] [--runs 5]

sweeps    a batch job on 3 nodes starts 4 two-node steps at once (srun --overlap, alternately on n[1-2] and
          n[2-3]), each running ddprun with one worker per node that prints its SLURM_STEP_ID, TORCHELASTIC_RUN_ID
          and WORLD_SIZE. A step is *merged* when a worker's world is not its own step's (its run id names another
          step, or its world size is not 2), *failed* when it did not exit 0 with both ranks. Totals over --sweeps.
start     srun -N2 ddprun --rdzv-auth munge where one node finds no munged (the joiner n2, or node 0 on n1): the
          time from srun's start to srun's return (every node of the step ended), median of --runs. Before issue
          18 the other node waited --rdzv-timeout (900 s).
arrays    (--arrays N, issue 54) one job array of N two-node tasks submitted at once (sbatch --array, -N2,
          --oversubscribe: all can run together on the 3 nodes), each task one srun step of ddprun with the
          defaults (automatic ports, 5 s --join-grace) and one worker per node. A task *started* when srun
          returned 0 with both workers run. Before 2026-12, 7 of 24 started (a node 0 that started a second after
          its joiner ended the step).
--ddprun runs another build's ddprun (e.g. the previous commit's) for the "before" figures.
"""
import argparse
import os
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../../tests/support"))
sys.path.insert(0, os.path.join(HERE, "../../tests/slurm"))  # test_step_isolation
from cluster import SlurmCluster  # noqa: E402
import test_step_isolation as steps  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "../../build"))
    ap.add_argument("--ddprun")
    ap.add_argument("--sweeps", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-start", action="store_true")
    ap.add_argument("--arrays", type=int, default=0, help="N: one job array of N two-node tasks (see above)")
    a = ap.parse_args()
    steps.DDPRUN = os.path.abspath(a.ddprun or os.path.join(a.build, "launcher/ddprun"))
    steps.WORKER = os.path.abspath(os.path.join(a.build, "tests/bin/test_worker"))
    with SlurmCluster(nodes=3) as c:
        if a.arrays:
            run_array(c, a.arrays)
        merged = failed = 0
        for i in range(a.sweeps):
            tmp = tempfile.mkdtemp(dir=c.dir)
            os.chmod(tmp, 0o777)
            out = os.path.join(tmp, "step")
            job, _ = c.sbatch_wait(steps.sweep_script(out), "-N3", "-o", os.path.join(tmp, "batch.out"), timeout=120)
            m, f, details = steps.judge_sweep(job, out)
            merged += m
            failed += f
            print(f"sweep {i + 1}: merged {m}, failed {f}", flush=True)
            for d in details:
                print("   ", d.splitlines()[0], flush=True)
        print(f"4 concurrent 2-node steps on 3 nodes, {a.sweeps} sweeps ({4 * a.sweeps} steps): "
              f"merged worlds {merged}, failed starts {failed}")
        if a.skip_start:
            return
        env = c.env(DDPRUN_MUNGE_SOCKET=c.path("munge/munge.socket"))
        for node in ("n2", "n1"):
            times = []
            for _ in range(a.runs):
                tmp = tempfile.mkdtemp(dir=c.dir)
                wrapper = os.path.join(tmp, "wrapper")
                with open(wrapper, "w") as f:
                    f.write(f"#!/bin/sh\nif [ \"$SLURMD_NODENAME\" = {node} ]; then export DDPRUN_MUNGE_SOCKET="
                            f"{tmp}/none.socket; fi\nexec {steps.DDPRUN} \"$@\"\n")
                os.chmod(wrapper, 0o755)
                r = c.srun("-N2", "--ntasks-per-node=1", wrapper, "--rdzv-auth", "munge", "--rdzv-timeout", 60,
                           "--nproc-per-node", 1, steps.WORKER, "exit=0", env=env, timeout=90)
                times.append(r.elapsed)
                print(f"munged down on {node}: srun exit {r.code} after {r.elapsed:.3f} s", flush=True)
            print(f"munged down on {node}: start failure -> every node of the step ended, median "
                  f"{statistics.median(times):.3f} s of {a.runs} (min {min(times):.3f}, max {max(times):.3f})")


def run_array(c, tasks):
    tmp = tempfile.mkdtemp(dir=c.dir)
    os.chmod(tmp, 0o777)
    script = (f"#!/bin/sh\nsrun -N2 --ntasks-per-node=1 {steps.DDPRUN} --nproc-per-node 1 {steps.WORKER} "
              f"env=SLURM_ARRAY_TASK_ID env=WORLD_SIZE sleep=0.5\necho \"rc=$?\"\n")
    t0 = time.monotonic()
    job = c.sbatch(script, f"--array=0-{tasks - 1}", "-N2", "--oversubscribe", "-o", os.path.join(tmp, "task.%a"))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and c.run("squeue", "-h", "-j", job).out.strip():
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    started = 0
    for i in range(tasks):
        try:
            with open(os.path.join(tmp, f"task.{i}")) as f:
                text = f.read()
        except OSError:
            text = ""
        ok = re.search(r"^rc=0$", text, re.M) and len(re.findall(r"WORLD_SIZE=2$", text, re.M)) == 2
        started += bool(ok)
        if not ok:
            print(f"task {i} did not start:\n{text[-600:]}", flush=True)
    print(f"job array of {tasks} two-node tasks at once: {started} of {tasks} started ({elapsed:.1f} s for all)",
          flush=True)


if __name__ == "__main__":
    main()
