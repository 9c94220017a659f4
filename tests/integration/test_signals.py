"""Signals sent to ddprun: stop signals are forwarded and end the job; USR1/USR2 are only forwarded."""
import glob
import os
import signal
import subprocess
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import PREEMPTED
from harness import DDPRUN, DdprunTestCase, WORKER, pid_alive
from multinode import MultiNodeCase


class Signals(DdprunTestCase):
    def start_workers(self, nproc, *steps, extra=()):
        proc = self.start("--nproc-per-node", nproc, *extra, WORKER, f"pidfile={self.path('pids')}", *steps,
                          f"ready={self.tmp}", "hang")
        self.wait_for_files([self.path(f"ready.{i}") for i in range(nproc)])
        return proc

    def test_stop_signals_are_forwarded_and_end_the_job_with_128_plus_n(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            for p in glob.glob(self.path("ready.*")) + glob.glob(self.path("pids")):
                os.remove(p)
            proc = self.start_workers(3, f"trap={sig.name[3:]}")
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=10)
            self.assertEqual(proc.returncode, 128 + sig, err)
            got = sorted(l for l in out.decode().splitlines())
            # Each worker's trap prints the signal it received, proving the forward.
            self.assertEqual(len(got), 3, out)
            for line in got:
                self.assertIn(f"got {signal.strsignal(sig)}", line)

    def test_stop_signals_inherited_ignored_are_handled_all_the_same(self):
        """Issue 54: a script's `ddprun ... &` inherits SIGINT and SIGQUIT ignored; such a ddprun ran to its end
        through `kill -INT` (torchrun stops). Now it stops as when nothing was ignored, and its workers get
        both signals at their default, as torchrun's do. SIGHUP ignored (nohup) stays ignored: test_supervisor_io."""
        def ignore_as_a_background_job():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2", WORKER, f"pidfile={self.path('pids')}",
                                 f"ready={self.tmp}", "hang"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env, start_new_session=True, preexec_fn=ignore_as_a_background_job)
        self.wait_for_files([self.path(f"ready.{i}") for i in range(2)])
        for pid, _ in self.read_pids(self.path("pids")).values():
            with open(f"/proc/{pid}/status") as f:
                ignored = int(next(l for l in f if l.startswith("SigIgn:")).split()[1], 16)
            self.assertFalse(ignored & (1 << (signal.SIGINT - 1)), "a worker must get SIGINT at its default")
            self.assertFalse(ignored & (1 << (signal.SIGQUIT - 1)), "a worker must get SIGQUIT at its default")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 130, err)
        self.assertLess(time.monotonic() - t0, 10, err)

    def test_usr1_and_usr2_are_forwarded_and_the_job_goes_on(self):
        proc = self.start_workers(2, "trap=USR1")
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=10)
        # The trap makes each worker exit 0 after printing: the job then succeeds.
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(len(out.decode().splitlines()), 2, out)
        self.assertNotIn(b"tearing down", err)

    def test_second_sigint_kills_at_once(self):
        proc = self.start_workers(2, "ignore=INT", "ignore=TERM", extra=("--term-timeout", "60"))
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(proc.returncode, 130, err)
        for pid, _ in self.read_pids(self.path("pids")).values():
            self.assertFalse(pid_alive(pid))


class NoticeAgreement(MultiNodeCase):
    """Issue 54: a scheduler's notice (SLURM's --signal=USR1@T) that reaches the nodes at different moments. Each node
    decided alone whether the job was preempted, so one completed job ended 79 on the node the notice reached while
    its workers ran and 0 on another (1 of 6 on a real cluster). The rendezvous now carries it: a notice counts for
    the job when it reached running workers of any node before that node was done, and then on every node."""

    def setUp(self):
        super().setUp()
        self.env.update(SLURM_JOB_ID="4243", SLURM_JOB_NUM_NODES="2")  # a batch job: 79 is the preempted exit

    def test_a_notice_that_reached_one_node_while_it_ran_is_every_nodes_preemption(self):
        # Node 0's worker saves and exits 0 on the notice; node 1's finishes on its own, later, never noticed.
        steps = ("trap=USR1", f"ready={self.ready}", "@0:hang", f"@1:waitfile={self.go}", "exit=0")
        procs = [self.node(r, 2, *steps) for r in range(2)]
        self.wait_ready(2)
        procs[0].send_signal(signal.SIGUSR1)
        self.stderr_until(procs[0], b"the job ends when every node", 20, why="node 0's worker never ended")
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, PREEMPTED, res)
            self.assertIn("job preempted after", res.stderr.decode(), res)

    def test_a_notice_after_a_node_was_done_preempts_nothing(self):
        # Node 1's worker is done and reported when the notice reaches node 1; node 0's then finishes unnoticed.
        steps = ("trap=USR1", f"ready={self.ready}", f"@0:waitfile={self.go}", "exit=0")
        procs = [self.node(r, 2, *steps) for r in range(2)]
        self.wait_ready(2)
        self.stderr_until(procs[1], b"the job ends when every node", 20, why="node 1's worker never ended")
        procs[1].send_signal(signal.SIGUSR1)
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)
            self.assertNotIn("preempted", res.stderr.decode(), res)
