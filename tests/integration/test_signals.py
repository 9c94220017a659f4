"""Signals sent to ddprun: stop signals are forwarded and end the job; USR1/USR2 are only forwarded."""
import glob
import os
import signal
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DdprunTestCase, WORKER, pid_alive


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
