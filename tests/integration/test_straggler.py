"""Issue 21's straggler naming (docs/MONITORING.md "Stragglers"): a rank that is alive but slow is named, with its pace and the
other ranks' median, in every node's log, the events file and the live view; a balanced job is never named; the
measure is each rank's own work per step where the workers say it (a lockstep job, where step times are equal),
else its step time. Real ddprun processes and their real rendezvous; the workers are tests/bin/test_worker beating
at chosen paces (the gloo and SDK workers are in test_straggler_torch.py and tests/worker_sdk)."""
import json
import os
import re
import signal
import subprocess

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import USAGE
from harness import WORKER
from multinode import MultiNodeCase
from wait import wait_until

STATUS = os.path.join(os.path.dirname(os.path.abspath(DDPRUN := os.environ.get("DDPRUN", ""))), "ddprun-status")
# Faster than the defaults (5 s samples, a 20 s window, named after 10 s), same rule.
FAST = ("--straggler-window", "3")


class Stragglers(MultiNodeCase):
    def setUp(self):
        super().setUp()
        self.runtime = self.path("runtime")
        os.mkdir(self.runtime, 0o700)
        self.env.update(XDG_RUNTIME_DIR=self.runtime, DDPRUN_STATUS_PERIOD_MS="500")

    def test_a_rank_that_steps_slower_is_named_by_its_step_time(self):
        events = self.path("events.jsonl")
        r = self.worker("@0:beatfor=9:50", "@1:beatfor=9:100", nproc=2, extra=(*FAST, "--events-file", events))
        self.assertEqual(r.code, 0, r)
        err = r.stderr.decode()
        m = re.search(r"straggler: rank 1 \(node 0, host [^)]+\) took (0\.\d+) s per step over the last 3 s, "
                      r"the other ranks' median (0\.\d+) s \(\+(\d+)%\)", err)
        self.assertIsNotNone(m, err)
        self.assertAlmostEqual(float(m.group(1)), 0.100, delta=0.03)
        self.assertAlmostEqual(float(m.group(2)), 0.050, delta=0.02)
        self.assertNotIn("straggler: rank 0", err)
        named = [e for e in self.events(events) if e["event"] == "straggler"]
        self.assertEqual([(e["rank"], e["node_rank"], e["measure"]) for e in named], [(1, 0, "step_time")], named)
        self.assertGreater(named[0]["per_step_s"], named[0]["median_s"] * 1.3)

    def test_in_lockstep_the_rank_that_works_longer_is_named_by_its_own_work(self):
        # Equal step times (both beat every 100 ms), as in DDP; rank 0 says 90 ms of its own work, rank 1 50 ms.
        r = self.worker("@0:beatfor=9:100:90", "@1:beatfor=9:100:50", nproc=2, extra=FAST)
        self.assertEqual(r.code, 0, r)
        err = r.stderr.decode()
        m = re.search(r"straggler: rank 0 \(node 0, host [^)]+\) took (0\.\d+) s of its own work per step over the "
                      r"last 3 s, the other ranks' median (0\.\d+) s", err)
        self.assertIsNotNone(m, err)
        self.assertAlmostEqual(float(m.group(1)), 0.090, delta=0.02)
        self.assertAlmostEqual(float(m.group(2)), 0.050, delta=0.015)

    def test_a_balanced_job_and_a_lockstep_job_without_work_are_never_named(self):
        for steps in (("beatfor=8:50",), ("beatfor=8:100:60",), ("@0:beatfor=8:100", "@1:beatfor=8:100:50")):
            with self.subTest(steps=steps):
                r = self.worker(*steps, nproc=3, extra=FAST)
                self.assertEqual(r.code, 0, r)
                self.assertNotIn(b"straggler", r.stderr)

    def test_threshold_0_names_nobody(self):
        r = self.worker("@0:beatfor=6:50", "@1:beatfor=6:150", nproc=2, extra=(*FAST, "--straggler-threshold", 0))
        self.assertEqual(r.code, 0, r)
        self.assertNotIn(b"straggler", r.stderr)

    def test_a_straggler_on_another_node_is_named_on_every_node_and_in_the_live_view(self):
        procs = [self.node(n, 2, "@0:beatfor=10:50", "@1:beatfor=10:50", "@3:beatfor=10:100", "@2:beatfor=10:50",
                           nproc=2, extra=(*FAST, "--run-id", "slowjob")) for n in range(2)]
        for p in procs:
            self.addCleanup(lambda p=p: p.poll() is None and os.killpg(p.pid, signal.SIGKILL))
        seen = self.stderr_until(procs[0], b"straggler: rank 3 (node 1", timeout=20)

        def view():
            r = subprocess.run([STATUS, "--json", "--run-id", "slowjob"], env=self.env, capture_output=True,
                               text=True, timeout=20)
            return json.loads(r.stdout)

        def marked():
            jobs = view()
            rank_3 = [r for j in jobs for n in j["nodes"] for r in n["ranks"] if r["rank"] == 3]
            return jobs if all(r["straggler"] for r in rank_3) else None
        # The other node's status is the one the rendezvous last heard (sampled every 0.5 s here).
        jobs = wait_until(marked, lambda: f"rank 3 marked a straggler in every view: {view()}", 5, interval=0.2)
        self.assertEqual(len(jobs), 2, jobs)
        for job in jobs:
            self.assertEqual([s["rank"] for s in job["stragglers"]], [3], job)
            ranks = {r["rank"]: r for n in job["nodes"] for r in n["ranks"]}
            self.assertTrue(ranks[3]["straggler"], ranks)
            self.assertEqual(ranks[3]["state"], "slow", ranks)  # --json says what the table says
            self.assertFalse(ranks[0]["straggler"] or ranks[1]["straggler"] or ranks[2]["straggler"], ranks)
        table = subprocess.run([STATUS, "--run-id", "slowjob"], env=self.env, capture_output=True, text=True,
                               timeout=20).stdout
        self.assertRegex(table, r"\n3 +1 +\S+ +\d+ +slow ")
        self.assertIn("straggler: rank 3 (node 1, host", table)
        results = self.wait_all(procs)
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.assertIn(b"straggler: rank 3 (node 1", results[1].stderr)
        self.assertNotIn(b"straggler: rank 0", seen + results[0].stderr + results[1].stderr)

    def test_straggler_action_stop_kills_the_rank_as_a_failure_with_the_reason(self):
        events = self.path("events.jsonl")
        r = self.worker("@0:beatfor=30:50", "@1:beatfor=30:100", nproc=2,
                        extra=(*FAST, "--straggler-action", "stop", "--events-file", events))
        self.assertEqual(r.code, 137, r)  # the rank's own end: SIGKILL
        err = r.stderr.decode()
        self.assertIn("rank 1 (pid", err)
        self.assertIn("is stopped as a straggler (--straggler-action stop)", err)
        self.assertRegex(err, r"root cause: rank 1 .*\n?.*stopped by --straggler-action stop: straggler: rank 1 "
                              r"\(node 0, host [^)]+\) took 0\.\d+ s per step")
        self.assertLess(r.elapsed, 25)  # not the 30 s the workers would beat
        kinds = [e["event"] for e in self.events(events)]
        self.assertLess(kinds.index("straggler"), kinds.index("exited"))

    def test_bad_values_are_refused_with_one_line_and_64(self):
        for flag, value, said in (("--straggler-threshold", "-5", "--straggler-threshold"),
                                  ("--straggler-threshold", "lots", "--straggler-threshold"),
                                  ("--straggler-window", "1", "--straggler-window must be at least 2 seconds"),
                                  ("--straggler-action", "kill", "--straggler-action 'kill': expected name or stop")):
            with self.subTest(flag=flag, value=value):
                r = self.run_ddprun(flag, value, "--nproc-per-node", 1, WORKER, "print=started")
                self.assertEqual(r.code, USAGE, r)
                self.assertIn(said, r.stderr.decode())
                self.assertNotIn(b"started", r.stdout)
