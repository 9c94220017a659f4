#!/usr/bin/python3
"""Many randomized supervision runs, for the record: the generator and the checks of
tests/integration/test_chaos.py (imported from there, so the two never drift apart).

  scripts/bench/chaos.py --runs 1000 --seed S [--jobs J] [--no-check-once] [--no-check-sigkilled] [--build DIR]

Runs 0..N-1 of seed S against DIR/launcher/ddprun and DIR/tests/bin/test_worker (default build/), each in a fresh
temp dir with --term-timeout 1 and an events file. --jobs J splits the runs over J processes (run i goes to
process i mod J), each a child subreaper of its own, so a survivor is always pinned on the right run; on a busy
machine keep J at 1 or 2. --no-check-once drops the "one SIGTERM per process per teardown" check
(test_chaos's CHAOS_CHECK_ONCE=0), --no-check-sigkilled the "nothing outlives a SIGKILLed ddprun" one
(CHAOS_CHECK_SIGKILLED=0), --no-check-cont the "a stopped worker gets its SIGTERM too" one
(CHAOS_CHECK_CONT=0), as for a build from before those were fixed.

Prints each defective run with its reproduction (CHAOS_SEED=S CHAOS_ONLY=I python3 -m unittest test_chaos, from
tests/integration) as it happens, then one line: runs, defects, seconds. Exits 1 when a run was defective.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/integration"))


def run_shard(args, shard, jobs):
    """Runs this process's share; returns (runs, [defect reports])."""
    import test_chaos  # also makes this process a child subreaper (harness)
    from chaos_support import limit_core_dumps

    limit_core_dumps()
    ddprun = os.path.join(args.build, "launcher", "ddprun")
    worker = os.path.join(args.build, "tests", "bin", "test_worker")
    root = tempfile.mkdtemp(prefix="ddprun_chaos_")
    env = dict(os.environ)
    env.pop("DDPRUN_LOG_LEVEL", None)
    defects, runs = [], 0
    try:
        for index in range(shard, args.runs, jobs):
            plan = test_chaos.plan_run(args.seed, index)
            tmp = tempfile.mkdtemp(prefix=f"run{index}_", dir=root)
            o = test_chaos.execute_run(plan, tmp, ddprun, worker, dict(env, TMPDIR=tmp))
            problems = test_chaos.check_run(plan, o, args.check_once, args.check_sigkilled, args.check_cont)
            runs += 1
            if problems:
                report = (f"{test_chaos.repro(plan, o)}\nproblems:\n  " + "\n  ".join(problems) +
                          f"\nddprun exit {o.code} after {o.elapsed:.2f} s\n--- stderr (end)\n"
                          f"{o.stderr[-1500:].decode(errors='replace')}")
                defects.append(report)
                print(report, file=sys.stderr, flush=True)
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return runs, defects


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=20261123)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--check-once", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--check-sigkilled", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--check-cont", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--shard", type=int, help=argparse.SUPPRESS)  # internal: one of --jobs processes
    args = p.parse_args()
    args.build = os.path.abspath(args.build)

    if args.shard is not None:
        runs, defects = run_shard(args, args.shard, args.jobs)
        print(json.dumps({"runs": runs, "defects": len(defects)}), flush=True)
        return 0

    t0 = time.monotonic()
    if args.jobs <= 1:
        runs, defects = run_shard(args, 0, 1)
        ndefects = len(defects)
    else:
        base = [sys.executable, os.path.abspath(__file__), "--runs", str(args.runs), "--seed", str(args.seed),
                "--jobs", str(args.jobs), "--build", args.build,
                "--check-once" if args.check_once else "--no-check-once",
                "--check-sigkilled" if args.check_sigkilled else "--no-check-sigkilled",
                "--check-cont" if args.check_cont else "--no-check-cont"]
        shards = [subprocess.Popen(base + ["--shard", str(i)], stdout=subprocess.PIPE) for i in range(args.jobs)]
        runs = ndefects = 0
        for s in shards:
            out, _ = s.communicate()
            if s.returncode != 0:
                print(f"chaos: shard exited {s.returncode}", file=sys.stderr)
                ndefects += 1
                continue
            result = json.loads(out.decode().strip().splitlines()[-1])
            runs += result["runs"]
            ndefects += result["defects"]
    seconds = time.monotonic() - t0
    print(f"chaos: seed {args.seed}: runs {runs}, defects {ndefects}, seconds {seconds:.1f}"
          f"{'' if args.check_once else ' (once-check off)'}"
          f"{'' if args.check_sigkilled else ' (sigkilled-check off)'}"
          f"{'' if args.check_cont else ' (cont-check off)'}", flush=True)
    return 1 if ndefects else 0


if __name__ == "__main__":
    sys.exit(main())
