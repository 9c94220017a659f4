"""Randomized multi-node runs, a CI-sized handful: 2-3 agents on loopback, failures in workers, from
outside, of whole agents and (when the build has --nnodes MIN:MAX) nodes joining and leaving; no orphan,
consistent rounds and restart counts, the root cause's exit code, no output line lost, bounded time.
The generator and runner are in chaos_multinode.py, the checks in chaos_multinode_check.py;
scripts/bench/chaos_multinode.py runs hundreds.

    CHAOS_MN_SEED=S   seed (default a fixed one, printed)      CHAOS_MN_RUNS=N   runs (default 8, ~20 s)
    CHAOS_MN_ONLY=I   only run I of the seed (a reproduction)  CHAOS_MN_ELASTIC=0  fixed node counts only
"""
import os
import sys
import tempfile
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
import chaos_multinode as cm
import chaos_multinode_check as cc
import harness
from chaos_support import limit_core_dumps
from harness import DdprunTestCase

DEFAULT_SEED = 20261123
DEFAULT_RUNS = 8


class MultiNodeChaos(DdprunTestCase):
    def setUp(self):
        super().setUp()
        limit_core_dumps()
        self.elastic = os.environ.get("CHAOS_MN_ELASTIC", "1") != "0" and cm.has_elastic(harness.DDPRUN)

    def run_plan(self, plan):
        tmp = tempfile.mkdtemp(prefix=f"run{plan.index}_", dir=self.tmp)
        return cm.execute_run(plan, tmp, harness.DDPRUN, harness.WORKER, self.env)

    def test_random_failures_across_agents_keep_the_contract(self):
        seed = int(os.environ.get("CHAOS_MN_SEED", DEFAULT_SEED))
        runs = int(os.environ.get("CHAOS_MN_RUNS", DEFAULT_RUNS))
        only = os.environ.get("CHAOS_MN_ONLY")
        indices = [int(only)] if only is not None else list(range(runs))
        print(f"\nchaos_multinode: seed {seed}, {len(indices)} run(s), elastic {'on' if self.elastic else 'off'} "
              "(CHAOS_MN_SEED / CHAOS_MN_RUNS / CHAOS_MN_ONLY / CHAOS_MN_ELASTIC)", file=sys.stderr, flush=True)
        failures, kinds = [], {}
        t0 = time.monotonic()
        for index in indices:
            plan = cm.plan_run(seed, index, self.elastic)
            o = self.run_plan(plan)
            for k in cc.injections_of(plan, o):
                kinds[k] = kinds.get(k, 0) + 1
            problems = cc.check_run(plan, o)
            if problems:
                failures.append(f"{cm.repro(plan, o)}\nproblems:\n  " + "\n  ".join(problems))
                print(failures[-1], file=sys.stderr, flush=True)
        print(f"chaos_multinode: {len(indices)} runs in {time.monotonic() - t0:.1f} s, injected {kinds}, "
              f"{len(failures)} defective", file=sys.stderr, flush=True)
        self.assertEqual(failures, [], f"{len(failures)} of {len(indices)} runs broke the contract (seed {seed}); "
                                       "each is printed above with its reproduction")
        if only is None:
            self.assertGreaterEqual(sum(kinds.values()), len(indices), "the runs injected too few failures")

    def test_the_checks_see_a_lost_line_a_wrong_env_or_code_a_bad_round_an_orphan_and_an_unexplained_restart(self):
        # A run with a restart and output on every agent, nobody SIGKILLed: then its outcome altered one way at a
        # time. Each alteration must be reported, and the run as it was must pass.
        plan = next(p for p in (cm.plan_run(DEFAULT_SEED, i, False) for i in range(1000, 1400))
                    if p.max_restarts >= 1 and not any(e.kind == "agent_signal" for e in p.events)
                    and any(pr.fate and pr.fate[0] == "exit" and rc == 0 for (n, rc, lr), pr in p.programs.items()))
        o = self.run_plan(plan)
        self.assertEqual(cc.check_run(plan, o), [], cm.repro(plan, o))
        self.assertTrue(any(e.get("restart_count") == 1 for evs in o.events.values() for e in evs),
                        cm.repro(plan, o))
        node, a = next((n, a) for n, a in o.agents.items() if a.stdout.count(b"\n") > 3)

        def reported(what, words):
            problems = cc.check_run(plan, o)
            self.assertTrue(any(words in p for p in problems), f"{what}: not reported in {problems}")

        lines = a.stdout.splitlines(keepends=True)
        numbered = [j for j, line in enumerate(lines) if cm.LINE_RE.match(line.rstrip(b"\n"))]
        a.stdout = b"".join(lines[:numbered[0]] + lines[numbered[0] + 1:])
        reported("a line lost in the middle", "lines out of order or missing")
        a.stdout = b"".join(lines[:-1])
        reported("the last line lost", "reached stdout")
        a.stdout = b"".join(lines[:-1]) + lines[-1][:-4] + b"\n"
        reported("a line cut short", "not whole")
        env = next(i for i, line in enumerate(lines) if b"]: e " in line)
        a.stdout = b"".join(lines[:env] + [lines[env].rsplit(b" ", 1)[0] + b" 1\n"] + lines[env + 1:])
        reported("a worker's MASTER_PORT", "the rendezvous said")
        a.stdout = b"".join(lines)

        code = a.proc.returncode
        a.proc.returncode = code + 1
        reported("an agent's exit code", "its summary says")
        a.proc.returncode = code

        rdzv = next(e for e in o.events[node] if e.get("event") == "rendezvous")
        rdzv["world_size"] += 1
        reported("a node with another world size", "disagree")
        rdzv["world_size"] -= 1
        rdzv["restart_count"] += 5
        reported("a round skipped", "follows round")
        rdzv["restart_count"] -= 5

        saved = dict(o.counts)
        for key in [k for k in o.counts if k[1] == 0]:
            prog = plan.programs[key]
            if prog.fate:
                o.counts[key] = -1  # the fate's step never reached: no failure happened in round 0
        reported("a restart with no failure before it", "began with no failure")
        o.counts = saved

        o.left, o.left_info = [1], ["1 [S] a process left behind"]
        reported("an orphan", "outlived every agent")
        o.left, o.left_info = [], []
        self.assertEqual(cc.check_run(plan, o), [])


if __name__ == "__main__":
    import unittest
    unittest.main()
