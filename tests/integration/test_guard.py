"""Nothing outlives a SIGKILLed ddprun: the job guard (common/process/job_guard.hpp) kills every process of
the job - workers, their children in the group, setsid children, double-forked daemons that ignore SIGTERM -
and removes the temporary run directory, within a second; on one node and on a killed node of a multi-node
job, whose other nodes end as they do when a node is lost."""
import os
import signal
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import WORKER, DdprunTestCase, comm, descendants, wait_gone
from multinode import MultiNodeCase
from ports import listening
from wait import wait_until

GRANDCHILDREN = ("fork=group:2", "fork=setsid", "fork=daemon", "fork=orphan")


class SigkillOneNode(DdprunTestCase):
    def start_job(self, nproc, *extra):
        proc = self.start("--nproc-per-node", nproc, *extra, WORKER, f"pidfile={self.path('pids')}",
                          *GRANDCHILDREN, f"ready={self.tmp}", "hang")
        self.wait_for_files([self.path(f"ready.{r}") for r in range(nproc)])
        return proc

    def job_pids(self):
        with open(self.path("pids")) as f:
            return [int(line.split()[1]) for line in f]

    def test_sigkill_of_ddprun_leaves_no_process_and_no_run_directory(self):
        proc = self.start_job(3)
        pids = self.job_pids()
        self.assertGreaterEqual(len(pids), 3 * 6, "every worker and grandchild wrote its pid")
        run_dirs = [d for d in os.listdir(self.tmp) if d.startswith("ddprun-")]
        self.assertEqual(len(run_dirs), 1, os.listdir(self.tmp))
        t0 = time.monotonic()
        proc.kill()
        proc.wait()
        left = wait_gone(pids, 1.0)
        self.assertEqual(left, [], f"alive 1 s after SIGKILL of ddprun ({time.monotonic() - t0:.2f} s)")
        err = proc.stderr.read().decode()
        proc.stdout.close()
        proc.stderr.close()
        self.assertIn("ddprun-guard: ddprun", err)
        # The guard removes the run directory after the kill; give it the same second.
        wait_until(lambda: not os.path.exists(os.path.join(self.tmp, run_dirs[0])), "the run directory to go", 1)
        self.assertEqual(wait_gone(descendants(), 2.0), [])

    def test_a_run_directory_left_by_ddprun_and_its_guard_both_killed_goes_with_the_next_run(self):
        # Both SIGKILLed at once (the OOM killer, SLURM's SIGKILL to the step): nobody removes the run directory.
        # The next ddprun of this user with the same TMPDIR does; a directory whose ddprun still runs, another
        # user's style of name, or one without an owner stays.
        proc = self.start_job(1)
        pids = self.job_pids()
        guards = [p for p in descendants() if comm(p) == "ddprun-guard"]
        self.assertEqual(len(guards), 1)
        run_dirs = [d for d in os.listdir(self.tmp) if d.startswith("ddprun-")]
        self.assertEqual(len(run_dirs), 1, os.listdir(self.tmp))
        for pid in [proc.pid, *guards, *pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.communicate()
        self.assertEqual(wait_gone(pids + guards, 2.0), [])
        self.assertTrue(os.path.isdir(os.path.join(self.tmp, run_dirs[0])), "left, with nobody to remove it")
        unowned = os.path.join(self.tmp, "ddprun-none_abcdef")
        os.mkdir(unowned)  # no owner file: not ddprun's to judge
        for name in ("ready.0", "pids"):
            os.remove(self.path(name))
        running = self.start_job(1)
        try:
            live = [d for d in os.listdir(self.tmp)
                    if d.startswith("ddprun-") and d not in (run_dirs[0], "ddprun-none_abcdef")]
            self.assertEqual(len(live), 1, os.listdir(self.tmp))
            self.assertFalse(os.path.exists(os.path.join(self.tmp, run_dirs[0])), "the dead run's directory stays")
            self.assertTrue(os.path.isdir(unowned))
            r = self.worker("exit=0", nproc=1)  # a third run sweeps too, and leaves the live one alone
            self.assertEqual(r.code, 0, r)
            self.assertTrue(os.path.isdir(os.path.join(self.tmp, live[0])), "a running job's directory was removed")
        finally:
            running.kill()
            running.communicate()

    def test_a_log_dir_chosen_by_the_user_is_kept(self):
        logs = self.path("logs")
        proc = self.start_job(1, "--log-dir", logs)
        pids = self.job_pids()
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        self.assertEqual(wait_gone(pids, 1.0), [])
        self.assertEqual(len(os.listdir(logs)), 1, "the user's log directory must survive")

    def test_a_normal_end_leaves_no_guard_behind(self):
        r = self.run_ddprun("--nproc-per-node", 2, WORKER, "exit=0")
        self.assertEqual(r.code, 0, r)
        self.assertNotIn(b"ddprun-guard", r.stderr)
        self.assertEqual(descendants(), [], "the guard must be gone when ddprun returns")

    def test_workers_carry_the_tag_and_not_the_token(self):
        self.env["DDPRUN_TOKEN"] = "s3cret"
        r = self.run_ddprun("--nproc-per-node", 1, WORKER, "env=DDPRUN_JOB_TAG", "env=DDPRUN_TOKEN")
        self.assertEqual(r.code, 0, r)
        out = r.stdout.decode()
        self.assertIn("DDPRUN_TOKEN unset", out)
        self.assertRegex(out, r"DDPRUN_JOB_TAG=[0-9a-f]{32}\n")
        self.assertNotIn("s3cret", out)


class GuardInOtherPhases(MultiNodeCase):
    def test_sigkill_while_waiting_for_nodes_leaves_nothing(self):
        # No worker exists yet: the guard has nothing to kill, but the run directory goes and so does it.
        proc = self.start("--nnodes", 2, "--node-rank", 0, "--master-addr", "127.0.0.1", "--rdzv-port", self.port,
                          WORKER, "exit=0")
        # Its run directory made, listening and waiting for node 1.
        wait_until(lambda: [d for d in os.listdir(self.tmp) if d.startswith("ddprun-")] and listening(self.port),
                   "ddprun's run directory and its rendezvous port", 10)
        proc.kill()
        proc.communicate()
        self.assertEqual(wait_gone(descendants(), 1.0), [], "something outlived ddprun")
        self.assertEqual([d for d in os.listdir(self.tmp) if d.startswith("ddprun-")], [], "run directory left")

    def test_a_guard_killed_by_hand_does_not_hold_ddprun(self):
        proc = self.start("--nproc-per-node", 2, WORKER, f"ready={self.ready}", f"waitfile={self.go}", "exit=0")
        self.wait_ready(2)
        guards = [p for p in descendants() if comm(p) == "ddprun-guard"]
        self.assertEqual(len(guards), 1, "one guard per ddprun")
        os.kill(guards[0], signal.SIGKILL)
        self.release()
        res = self.wait_all([proc], timeout=10)[0]
        self.assertEqual(res.code, 0, res)


class SigkillOneOfTwoNodes(MultiNodeCase):
    def test_killed_node_is_cleaned_and_the_other_node_ends(self):
        pidfile = self.path("pids")
        steps = (f"pidfile={pidfile}", *GRANDCHILDREN, f"ready={self.ready}", "hang")
        n0 = self.node(0, 2, *steps, nproc=2, extra=("--term-timeout", "1"))
        n1 = self.node(1, 2, *steps, nproc=2)
        self.wait_ready(4)
        with open(pidfile) as f:
            rows = [tuple(map(int, line.split())) for line in f]
        node1_pids = [pid for rank, pid, _ in rows if rank >= 2]
        n1.kill()
        n1.wait()
        self.assertEqual(wait_gone(node1_pids, 1.0), [], "node 1's processes outlived its SIGKILLed ddprun")
        out, err = n0.communicate(timeout=20)
        n1.stdout.close()
        n1.stderr.close()
        self.assertNotEqual(n0.returncode, 0, err)
        self.assertIn(b"node 1", err)
