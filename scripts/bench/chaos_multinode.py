#!/usr/bin/python3
"""Many randomized multi-node runs, for the record (issue 10, figure 4): the generator and runner of
tests/support/chaos_multinode.py and the checks of chaos_multinode_check.py beside it (shared with
test_chaos_multinode.py, so the two never drift apart).

  scripts/bench/chaos_multinode.py --runs 150 --seed S [--build DIR] [--elastic auto|on|off] [--jobs J]
  scripts/bench/chaos_multinode.py --seed S --only I [--keep]      # replay run I of seed S, show its files

Each run: 2-3 ddprun agents on loopback (DIR/launcher/ddprun, default build/), 1-2 DIR/tests/bin/test_worker
each, --max-restarts 0-3, --term-timeout 1, an events file per agent, and randomized failures at random times:
a worker exits non-zero, raises a signal or hangs (--hang-timeout), a worker gets a signal or SIGSTOP from
outside, an agent is SIGKILLed or gets SIGTERM/SIGINT, and with elastic membership (--nnodes MIN:MAX, used in
half the runs when the build has it: --elastic auto) nodes join and leave. Checked for every run: orphans 0,
rounds and restart counts consistent on every node, exit codes = the root cause's, no output line lost, every
agent ended within 20 s (tests/support/chaos_multinode.py's docstring has the details).

Prints each defective run with its reproduction as it happens, then one line: runs (elastic ones), agents,
rounds held, numbered lines checked, failures injected by kind (an agent stopped in an elastic run counts as
a node leaving: leave_kill, leave_term...), joins (admitted, refused at MAX, too late), defects, seconds.
Exits 1 when a run was defective. --jobs J runs J processes (run i in process i mod J), each a child subreaper
of its own; on a busy 2-core machine keep J at 1.
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))


def run_shard(args, shard, jobs):
    """Runs this process's share; returns (runs, {kind: count}, [defect reports])."""
    import chaos_multinode as cm  # also makes this process a child subreaper (harness)
    import chaos_multinode_check as cc
    from chaos_support import limit_core_dumps

    limit_core_dumps()
    ddprun = os.path.join(args.build, "launcher", "ddprun")
    worker = os.path.join(args.build, "tests", "bin", "test_worker")
    elastic = {"on": True, "off": False}.get(args.elastic)
    if elastic is None:
        elastic = cm.has_elastic(ddprun)
    root = tempfile.mkdtemp(prefix="ddprun_chaos_mn_")
    env = dict(os.environ)
    kinds, stats, defects, runs = {}, {}, [], 0
    indices = [args.only] if args.only is not None else range(shard, args.runs, jobs)
    try:
        for index in indices:
            plan = cm.plan_run(args.seed, index, elastic)
            tmp = tempfile.mkdtemp(prefix=f"run{index}_", dir=root)
            o = cm.execute_run(plan, tmp, ddprun, worker, env)
            problems = cc.check_run(plan, o)
            runs += 1
            for k in cc.injections_of(plan, o):
                kinds[k] = kinds.get(k, 0) + 1
            for k, v in cc.stats_of(plan, o).items():
                stats[k] = stats.get(k, 0) + v
            if problems or args.verbose or args.only is not None:
                report = (f"{cm.repro(plan, o)}\n" +
                          ("problems:\n  " + "\n  ".join(problems) if problems else "no problems") + "\n" +
                          "".join(f"--- agent {n} stderr (end)\n{a.stderr[-1200:].decode(errors='replace')}"
                                  for n, a in o.agents.items()))
                if problems:
                    defects.append(report)
                print(report, file=sys.stderr, flush=True)
            if args.keep:
                print(f"files of run {index}: {tmp}", file=sys.stderr)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return runs, kinds, stats, defects, elastic


def summary_line(seed, runs, kinds, stats, ndefects, seconds, elastic):
    def group(names):
        total = sum(kinds[k] for k in names)
        return f"{total} ({', '.join(f'{k} {kinds[k]}' for k in sorted(names, key=lambda k: -kinds[k]))})"
    joins = [k for k in kinds if k.startswith("join")]
    failures = [k for k in kinds if k not in joins]
    return (f"chaos_multinode: seed {seed}: runs {runs} ({stats.get('elastic', 0)} elastic), agents "
            f"{stats.get('agents', 0)}, rounds {stats.get('rounds', 0)}, "
            f"numbered lines checked {stats.get('lines', 0)}; "
            f"injected {sum(kinds.values())}: failures {group(failures)}, joins {group(joins)}; "
            f"defects {ndefects}, seconds {seconds:.1f}{'' if elastic else ' (elastic membership off)'}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=150)
    p.add_argument("--seed", type=int, default=20261123)
    p.add_argument("--only", type=int, help="run only this index of the seed (a reproduction)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--elastic", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--keep", action="store_true", help="keep each run's directory (events, wrappers, counts)")
    p.add_argument("--verbose", action="store_true", help="print every run, not only the defective ones")
    p.add_argument("--shard", type=int, help=argparse.SUPPRESS)  # internal: one of --jobs processes
    args = p.parse_args()
    args.build = os.path.abspath(args.build)

    if args.shard is not None:
        runs, kinds, stats, defects, _ = run_shard(args, args.shard, args.jobs)
        print(json.dumps({"runs": runs, "kinds": kinds, "stats": stats, "defects": len(defects)}), flush=True)
        return 0

    t0 = time.monotonic()
    if args.jobs <= 1 or args.only is not None:
        runs, kinds, stats, defects, elastic = run_shard(args, 0, 1)
        ndefects = len(defects)
    else:
        base = [sys.executable, os.path.abspath(__file__), "--runs", str(args.runs), "--seed", str(args.seed),
                "--jobs", str(args.jobs), "--build", args.build, "--elastic", args.elastic]
        shards = [subprocess.Popen(base + ["--shard", str(i)], stdout=subprocess.PIPE) for i in range(args.jobs)]
        runs = ndefects = 0
        kinds, stats = {}, {}
        for s in shards:
            out, _ = s.communicate()
            if s.returncode != 0:
                print(f"chaos_multinode: shard exited {s.returncode}", file=sys.stderr)
                ndefects += 1
                continue
            result = json.loads(out.decode().strip().splitlines()[-1])
            runs += result["runs"]
            ndefects += result["defects"]
            for k, v in result["kinds"].items():
                kinds[k] = kinds.get(k, 0) + v
            for k, v in result["stats"].items():
                stats[k] = stats.get(k, 0) + v
        import chaos_multinode as cm
        elastic = {"on": True, "off": False}.get(args.elastic)
        if elastic is None:
            elastic = cm.has_elastic(os.path.join(args.build, "launcher", "ddprun"))
    print(summary_line(args.seed, runs, kinds, stats, ndefects, time.monotonic() - t0, elastic), flush=True)
    return 1 if ndefects else 0


if __name__ == "__main__":
    sys.exit(main())
