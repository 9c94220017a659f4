"""Whole jobs on the real SLURM cluster: a failing rank ends every node at once with one root cause, scancel
leaves nothing, notices reach each worker once, restarts happen on every node, preemption exits 79."""
import collections
import os
import signal
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import PREEMPTED
from harness import comm
from slurm_jobs import DDPRUN, JobCase, WORKER
from wait import wait_until


def read_records(path):
    """[(pid, rank, SIGNAME)] from test_worker's sigrecord= file."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(int(p), int(r), s) for p, r, s in (line.split() for line in f if line.strip())]


class Failures(JobCase):
    def test_a_failing_rank_ends_every_node_quickly_with_one_root_cause(self):
        proc = self.start_step(3, "--nproc-per-node", 2, WORKER, f"ready={self.path('ready')}",
                               f"waitfile={self.path('go')}", "@3:exit=7", "hang")
        self.wait_ready(6)
        job = self.job_id_of()
        t0 = time.monotonic()
        open(self.path("go"), "w").close()
        out, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
        self.assertLess(elapsed, 2.5, err)  # issue 8: every node ends within 2 s of the failure
        self.assertEqual(proc.returncode, 7, err)
        # Every node names the same root cause: rank 3 on node 1.
        causes = [line for line in err.splitlines() if "ddprun: root cause: " in line]
        self.assertEqual(len(causes), 3, err)
        for line in causes:
            self.assertIn("root cause: rank 3 (local rank 1, node 1,", line, err)
        info = self.cluster.wait_job(job, timeout=20)
        self.assertEqual(info["JobState"], "FAILED", info)
        self.assertEqual(info["ExitCode"], "7:0", info)

    def test_scancel_leaves_nothing_behind(self):
        proc = self.start_step(3, "--nproc-per-node", 2, WORKER, f"ready={self.path('ready')}", "fork=orphan",
                               "hang")
        self.wait_ready(6)
        job = self.job_id_of()
        t0 = time.monotonic()
        self.cluster.run("scancel", job)
        proc.communicate(timeout=30)
        wait_until(lambda: not self.cluster.leftovers(), lambda: f"the job's processes to go after scancel "
                   f"({time.monotonic() - t0:.1f} s): {self.cluster.leftovers()}", 15, interval=0.05)
        self.assertEqual(self.cluster.wait_job(job)["JobState"], "CANCELLED")

    def test_max_restarts_restarts_every_node_with_equal_counts(self):
        script = ('echo R=$RANK C=$TORCHELASTIC_RESTART_COUNT; '
                  'if [ $RANK = 2 ] && [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then exit 3; fi; sleep 0.2')
        res = self.cluster.srun("-N3", "--ntasks-per-node=1", DDPRUN, "--nproc-per-node", 1, "--max-restarts", 1,
                                "sh", "-c", script)
        self.assertEqual(res.code, 0, res)
        for rank in range(3):
            self.assertIn(f"[rank{rank}]: R={rank} C=1\n", res.out, res)
        counts = collections.Counter(line.split("C=")[1] for line in res.out.splitlines() if " C=" in line)
        self.assertEqual(counts["1"], 3, res)


class Signals(JobCase):
    def run_notice(self, nodes=2):
        record = self.path("signals")
        proc = self.start_step(nodes, "--nproc-per-node", 2, WORKER, f"sigrecord={record}",
                               f"ready={self.path('ready')}", "hang")
        self.wait_ready(2 * nodes)
        job = self.job_id_of()
        self.cluster.run("scancel", "-s", "USR1", job)
        time.sleep(1.0)  # a second copy, if any, comes within milliseconds
        records = read_records(record)
        self.cluster.run("scancel", job)
        proc.communicate(timeout=30)
        return records

    def test_scancel_usr1_reaches_each_worker_once(self):
        records = self.run_notice()
        usr1 = collections.Counter(rank for _, rank, sig in records if sig == "SIGUSR1")
        self.assertEqual(dict(usr1), {0: 1, 1: 1, 2: 1, 3: 1}, records)

    def test_scancel_term_reaches_each_worker_once(self):
        # Three nodes: the rendezvous' stop from the node whose slurmstepd signalled first reaches the other
        # nodes a few ms before their own slurmstepd's SIGTERM; they wait for it instead of sending a second copy.
        record = self.path("signals")
        proc = self.start_step(3, "--nproc-per-node", 2, WORKER, f"sigrecord={record}", "termexit=0.5",
                               f"ready={self.path('ready')}", "hang")
        self.wait_ready(6)
        self.cluster.run("scancel", self.job_id_of())
        proc.communicate(timeout=30)
        term = collections.Counter(rank for _, rank, sig in read_records(record) if sig == "SIGTERM")
        self.assertEqual(dict(term), {r: 1 for r in range(6)}, read_records(record))

    def test_a_notice_then_clean_exits_is_preempted(self):
        # --signal=USR1@T's notice, stood in for by scancel -s USR1: workers that save and exit 0 make ddprun
        # exit 79 on every node, and the job ends with 79 for the batch script to requeue on.
        proc = self.start_step(2, "--nproc-per-node", 2, WORKER, "trap=USR1", f"ready={self.path('ready')}",
                               "hang")
        self.wait_ready(4)
        job = self.job_id_of()
        self.cluster.run("scancel", "-s", "USR1", job)
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, PREEMPTED, err)
        self.assertEqual(self.cluster.wait_job(job)["ExitCode"], f"{PREEMPTED}:0")


class StartupFailures(JobCase):
    """A node that fails at start-up, without srun -K: a usage error on one node (exit 64, never joins) or on node
    0 (no server ever listens). ddprun's --join-grace (5 s in a step) ends every node within seconds; before, the
    others waited the whole --rdzv-timeout (900 s by default; 30 s here) and exited 75."""

    def run_step(self, script):
        """A 3-node step running `script` under sh on each node ($0: ddprun; "$@": the worker and its steps);
        returns srun's exit code, its stderr and how long it took."""
        t0 = time.monotonic()
        proc = self.cluster.popen("srun", "--partition=test", "-N3", "--ntasks-per-node=1", "sh", "-c", script,
                                  DDPRUN, WORKER, f"ready={self.path('ready')}", "exit=0")
        out, err = proc.communicate(timeout=60)
        return proc.returncode, err, time.monotonic() - t0

    def run_with_one_bad_node(self, bad):
        return self.run_step(f'if [ "$SLURM_NODEID" = {bad} ]; then exec "$0" --no-such-option; fi; '
                             f'exec "$0" --rdzv-timeout 30 --term-timeout 5 "$@"')

    def test_a_usage_error_on_one_node_ends_the_step_within_seconds(self):
        code, err, elapsed = self.run_with_one_bad_node(2)
        self.assertNotEqual(code, 0, err)
        self.assertIn("no node joined or left for 5.0 s (--join-grace", err)
        self.assertLess(elapsed, 20, err)  # 5 s of grace and srun's own start and end, against 30 s
        self.assertEqual(os.listdir(self.path("ready")), [], "no worker may start")

    def test_a_node_killed_after_joining_ends_the_step_within_seconds(self):
        # Node 1's ddprun joins and is SIGKILLed 1 s later; node 2 starts 2 s late, so the round never forms.
        # Before, node 0 kept node 1's place for a replacement SLURM cannot send, until --rdzv-timeout.
        code, err, elapsed = self.run_step('case "$SLURM_NODEID" in '
                                           '1) "$0" --rdzv-timeout 30 "$@" & sleep 1; kill -9 $!; wait; exit 9;; '
                                           '2) sleep 2;; esac; '
                                           'exec "$0" --rdzv-timeout 30 --term-timeout 5 "$@"')
        self.assertNotEqual(code, 0, err)
        self.assertIn("joined, then left", err)
        self.assertLess(elapsed, 20, err)  # 2 s late, 5 s of grace; 30 s before
        self.assertEqual(os.listdir(self.path("ready")), [], "no worker may start")

    def test_a_program_missing_on_one_node_ends_the_step_at_once(self):
        code, err, elapsed = self.run_step('if [ "$SLURM_NODEID" = 1 ]; then exec "$0" --rdzv-timeout 30 '
                                           './no-such-program; fi; exec "$0" --rdzv-timeout 30 --term-timeout 5 "$@"')
        self.assertNotEqual(code, 0, err)
        self.assertIn("no-such-program", err)
        self.assertLess(elapsed, 15, err)
        self.assertEqual(os.listdir(self.path("ready")), [], "no worker may start")

    def test_a_usage_error_on_node_0_ends_the_others_within_seconds(self):
        code, err, elapsed = self.run_with_one_bad_node(0)
        self.assertNotEqual(code, 0, err)
        self.assertIn("(twice --join-grace)", err)
        self.assertLess(elapsed, 25, err)  # 10 s without a server, against 30 s
        self.assertEqual(os.listdir(self.path("ready")), [], "no worker may start")


class TimeLimit(JobCase):
    """Issue 34: at a step's time limit SLURM sends SIGTERM, then SIGKILL after KillWait (5 s on the test cluster).
    With workers that ignore SIGTERM, ddprun's --term-timeout (30 s before) outlasted KillWait and SLURM's SIGKILL
    took ddprun before its summary. In a SLURM job the default ends before KillWait (five sixths of it): ddprun
    SIGKILLs its workers itself and every node prints its summary."""

    def test_a_time_limit_with_workers_ignoring_sigterm_still_gets_every_summary(self):
        proc = self.cluster.popen("srun", "--partition=test", "-N2", "--ntasks-per-node=1", "--time=1", DDPRUN,
                                  WORKER, f"ready={self.path('ready')}", "ignore=TERM", "hang")
        self.wait_ready(2)
        out, err = proc.communicate(timeout=180)  # a 1 minute limit, checked by slurmctld every 30 s or so
        self.assertEqual(proc.returncode, 143, err)
        self.assertIn("grace period of 4000 ms over: sending SIGKILL", err)  # 5/6 of KillWait 5 s, in whole s
        for node in ("n1", "n2"):
            # Whichever node's slurmstepd signalled first is the root cause, the same on both.
            self.assertRegex(err, rf"(?m)^\[{node}\] ddprun: root cause: ddprun on node \d \(host n\d\) received "
                                  rf"SIGTERM", err)
            self.assertRegex(err, rf"(?m)^\[{node}\] ddprun:   rank \d+ .* signal 9 \(SIGKILL\)", err)


class FailureIsNotPreemption(JobCase):
    """Issue 34: a job that failed ends with its root cause's code on every node, whatever stop reaches a node
    during the teardown. Before, node 0 (its worker saving for 2 s on SIGTERM, as the docs ask) took srun -K's
    SIGTERM, or a scancel, for a preemption: "job preempted ... exit code 79", sacct FAILED 79:0, and the
    preemption recipe requeued a failed job."""

    def failing_step(self, *srun_args):
        return self.start_step(2, "--nproc-per-node", 1, WORKER, "termsave=2", f"ready={self.path('ready')}",
                               f"waitfile={self.path('go')}", "@1:exit=3", "hang", srun_args=srun_args)

    def check_failed_with_3(self, proc, job):
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 3, err)
        self.assertNotIn("preempted", err)
        info = self.cluster.wait_job(job, timeout=30)
        self.assertEqual((info["JobState"], info["ExitCode"]), ("FAILED", "3:0"), info)

    def test_srun_kill_on_bad_exit_during_the_teardown(self):
        proc = self.failing_step("--kill-on-bad-exit=1")
        self.wait_ready(2)
        job = self.job_id_of()
        open(self.path("go"), "w").close()
        self.check_failed_with_3(proc, job)

    def test_scancel_during_the_teardown(self):
        for how in (("scancel",), ("scancel", "-s", "USR1"), ("scancel", "-b", "-s", "USR1")):
            with self.subTest(how=how):
                for f in os.listdir(self.path("ready")):
                    os.unlink(os.path.join(self.path("ready"), f))
                if os.path.exists(self.path("go")):
                    os.unlink(self.path("go"))
                proc = self.failing_step()
                self.wait_ready(2)
                job = self.job_id_of()
                open(self.path("go"), "w").close()
                time.sleep(0.5)  # rank 1 failed, node 0's worker is saving (2 s)
                self.cluster.run(*how, job)
                out, err = proc.communicate(timeout=60)
                self.assertNotEqual(proc.returncode, PREEMPTED, err)
                self.assertIn("root cause: rank 1 (local rank 0, node 1,", err)
                self.cluster.wait_job(job, timeout=30)


class NodeFailureIsNotPreemption(JobCase):
    """Issue 54: a node lost to SLURM (its slurmd gone, the node set DOWN, the job NODE_FAIL) is a lost node, exit 1,
    on every node. slurmctld ends the job's other nodes with the SIGTERM a preemption sends; their workers, saving on
    it, exited 0, and every node said "job preempted ... exit code 79" (sacct NODE_FAIL). The test kills n3's slurmd
    and sets n3 DOWN, what slurmctld itself does once SlurmdTimeout (30 s here) passes without an answer from it."""

    def test_slurmd_killed_and_its_node_down_is_a_lost_node_on_every_node(self):
        proc = self.start_step(3, "--nproc-per-node", 1, WORKER, "trap=TERM", f"ready={self.path('ready')}", "hang")
        self.wait_ready(3)
        job = self.job_id_of()
        slurmd = self.cluster.daemons["slurmd-n3"]
        try:  # not addCleanup: tearDown, which runs first, waits for every node idle
            slurmd.kill()
            slurmd.wait()
            self.cluster.run("scontrol", "update", "nodename=n3", "state=down", "reason=slurmd killed")
            out, err = proc.communicate(timeout=60)
            self.assertEqual(self.cluster.wait_job(job, timeout=30)["JobState"], "NODE_FAIL")
        finally:
            self.bring_back_n3()
        self.assertNotIn("preempted", err)
        # n1 and n2 speak through srun; n3's ddprun lost its slurmd, and with it the way to srun.
        for node in ("n1", "n2"):
            self.assertIn(f"[{node}] ddprun: root cause: SLURM ended the job for a node failure: n3 is DOWN "
                          "(slurmd killed)", err)
            self.assertIn(f"[{node}] ddprun: exit code 1\n", err)
        self.assertEqual(proc.returncode, 1, err)

    def bring_back_n3(self):
        # n3's ddprun and worker end with the job (the rendezvous stops them); its slurmstepd, whose slurmd is
        # gone, stays until killed: SLURM's leftover, not ddprun's.
        wait_until(lambda: not [p for p in self.cluster.leftovers() if comm(p) in ("ddprun", "test_worker")],
                   "n3's ddprun and worker to end with the job", 20)
        self.cluster.kill_job_processes()
        self.cluster._start_slurmd("n3")
        self.cluster.run("scontrol", "update", "nodename=n3", "state=resume")


class SignalsUnderProctrackPgid(Signals):
    """proctrack/pgid signals only the task's process group (ddprun's): ddprun forwards, each worker still
    gets each notice once."""
    PROCTRACK = "pgid"
