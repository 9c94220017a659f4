#!/usr/bin/env python3
"""A SLURM step of two nodes whose node 0 starts late (issue 54): does every step start? On one machine, without
SLURM's daemons: two ddprun with a step's variables (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_NODEID, the step's node
list 127.0.0.1,127.0.0.1) and no --rdzv-port, so they take the step's 8 candidate ports and the 5 s --join-grace of
a step, as under srun. Node 1 starts first; node 0 after DELAY s, for DELAY = 0, 0.5, ... MAX. A step "started"
when both exited 0 with their worker run. Before 2026-12 (one candidate port per back-off step of up to 1 s) node 0
late by 1.5 s ended the step (75 on both).

    scripts/bench/slurm_late_node0.py --build build [--max 8] [--step 0.5] [--runs 1] [--json OUT]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time


def run_step(ddprun, worker, delay, tmp):
    job = random.randrange(1_000_000, 9_000_000)
    env_base = dict(os.environ, TMPDIR=tmp, SLURM_NNODES="2", SLURM_JOB_NODELIST="127.0.0.1,127.0.0.1",
                    SLURM_JOB_ID=str(job), SLURM_STEP_ID="0", SLURM_STEP_NODELIST="127.0.0.1,127.0.0.1",
                    DDPRUN_TOKEN="bench-token")
    env_base.pop("DDPRUN_LOG_LEVEL", None)

    def node(rank):
        return subprocess.Popen([ddprun, "--nproc-per-node", "1", worker, "env=RANK"],
                                env=dict(env_base, SLURM_NODEID=str(rank)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.monotonic()
    joiner = node(1)
    time.sleep(delay)
    host = node(0)
    t_host = time.monotonic()
    outs = [p.communicate(timeout=60) for p in (host, joiner)]
    codes = [host.returncode, joiner.returncode]
    ran = all(f"RANK={r}".encode() in outs[r][0] for r in (0, 1))
    return {"delay_s": delay, "job": job, "codes": codes, "started": codes == [0, 0] and ran,
            "node0_to_end_s": round(time.monotonic() - t_host, 3), "total_s": round(time.monotonic() - t0, 3),
            "stderr_tail": [o[1].decode(errors="replace")[-300:] for o in outs] if codes != [0, 0] else []}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--max", type=float, default=8.0)
    ap.add_argument("--step", type=float, default=0.5)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    ddprun = os.path.abspath(os.path.join(args.build, "launcher", "ddprun"))
    worker = os.path.abspath(os.path.join(args.build, "tests", "bin", "test_worker"))
    results = []
    with tempfile.TemporaryDirectory(prefix="ddprun_late0_") as tmp:
        delay = 0.0
        while delay <= args.max + 1e-9:
            for _ in range(args.runs):
                r = run_step(ddprun, worker, round(delay, 3), tmp)
                results.append(r)
                print(f"node 0 late {r['delay_s']:4.1f} s: exit {r['codes'][0]} {r['codes'][1]} "
                      f"{'started' if r['started'] else 'FAILED'}, node 0 start -> both ended {r['node0_to_end_s']:.2f} s",
                      flush=True)
            delay += args.step
    started = sum(r["started"] for r in results)
    print(f"{started} of {len(results)} steps started")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "started": started, "steps": len(results)}, f, indent=1)
    return 0 if started == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
