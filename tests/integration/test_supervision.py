"""Failure semantics on one node: the first failure tears everything down, exit codes are exact."""
import os
import signal
import time

from harness import DdprunTestCase, WORKER, pid_alive


class ExitCodes(DdprunTestCase):
    def test_success_when_every_worker_exits_zero(self):
        r = self.worker("print=ok", nproc=4)
        self.assertEqual(r.code, 0, r)
        self.assertEqual(sorted(r.stdout.decode().splitlines()), [f"[rank{i}]: ok" for i in range(4)])

    def test_exit_code_of_the_failing_worker_is_passed_through_for_0_to_255(self):
        for code in range(256):
            r = self.run_ddprun("--nproc-per-node", 1, "-q", "sh", "-c", f"exit {code}")
            self.assertEqual(r.code, code, r)

    def test_death_by_signal_gives_128_plus_the_signal(self):
        for sig in ("SEGV", "KILL", "ABRT", "TERM", "USR1"):
            r = self.worker(f"@1:kill={sig}", "@0:hang", nproc=2)
            self.assertEqual(r.code, 128 + getattr(signal, "SIG" + sig), r)
            self.assertIn("root cause: rank 1", r.stderr.decode(), r)
            self.assertIn("SIG" + sig, r.stderr.decode(), r)

    def test_program_that_fails_to_exec_at_run_time_gives_127(self):
        # Passes validation (an executable file), but execve fails: its interpreter does not exist.
        script = self.path("bad_interp")
        with open(script, "w") as f:
            f.write("#!/nonexistent/interpreter\n")
        os.chmod(script, 0o755)
        r = self.run_ddprun("--nproc-per-node", 2, script)
        self.assertEqual(r.code, 127, r)
        err = r.stderr.decode()
        # In order: what started, why the rank did not, the teardown; the summary gives the reason, not "pid 0".
        started = err.index("INFO: started 0 of 2 workers")
        failed = err.index("ERROR: rank 0 could not be started: cannot execute")
        self.assertLess(started, failed, err)
        self.assertLess(failed, err.index("tearing down"), err)
        self.assertIn("root cause: rank 0 (local rank 0, node 0, host ", err)
        self.assertIn(") could not be started (exit code 127): cannot execute '" + script + "': No such file or "
                      "directory (the file exists: its interpreter '/nonexistent/interpreter', named on its '#!' "
                      "line, does not) at ", err)
        self.assertRegex(err, r"rank 0 +local 0 +pid - +failed +not started: exit code 127 ")
        self.assertNotIn("pid 0", err)

    def test_an_interpreter_that_cannot_be_executed_gives_126_with_the_reason(self):
        interpreter = self.path("not_executable")
        with open(interpreter, "w") as f:
            f.write("")
        script = self.path("script")
        with open(script, "w") as f:
            f.write(f"#!{interpreter}\n")
        os.chmod(script, 0o755)
        r = self.run_ddprun("--nproc-per-node", 1, script)
        self.assertEqual(r.code, 126, r)
        self.assertIn(f"could not be started (exit code 126): cannot execute '{script}': Permission denied at ",
                      r.stderr.decode(), r)


class Teardown(DdprunTestCase):
    def test_one_failure_kills_every_other_worker_quickly(self):
        pidfile = self.path("pids")
        t0 = time.monotonic()
        r = self.worker(f"pidfile={pidfile}", f"ready={self.tmp}", "@2:sleep=0.3", "@2:exit=5", "hang", nproc=4)
        self.assertEqual(r.code, 5, r)
        self.assertLess(time.monotonic() - t0, 5, r)
        pids = self.read_pids(pidfile)
        self.assertEqual(len(pids), 4)
        for rank, (pid, pgid) in pids.items():
            self.assertEqual(pid, pgid, "each worker leads its own process group")
            self.assertFalse(pid_alive(pid), f"rank {rank} survived")
        err = r.stderr.decode()
        self.assertIn("root cause: rank 2", err)
        self.assertEqual(err.count("victim"), 3, r)

    def test_root_cause_is_the_first_failure_even_when_victims_fail_later_with_other_codes(self):
        # The victims ignore SIGTERM, so they die half a second later, by SIGKILL, with another status.
        r = self.worker("@0:sleep=0.2", "@0:exit=9", "ignore=TERM", "hang", nproc=3, extra=("--term-timeout", "0.5"))
        self.assertEqual(r.code, 9, r)
        err = r.stderr.decode()
        self.assertIn("root cause: rank 0", err)
        self.assertIn("exit code 9", err)
        self.assertEqual(err.count("signal 9 (SIGKILL)"), 2, r)  # the victims needed the grace period and SIGKILL

    def test_workers_ignoring_sigterm_are_killed_after_the_grace_period(self):
        t0 = time.monotonic()
        r = self.worker("ignore=TERM", "@1:sleep=0.2", "@1:exit=1", "hang", nproc=2, extra=("--term-timeout", "1"))
        elapsed = time.monotonic() - t0
        self.assertEqual(r.code, 1, r)
        self.assertGreaterEqual(elapsed, 1.0, r)
        self.assertLess(elapsed, 6, r)

    def test_grandchildren_in_the_worker_group_and_escaped_ones_are_killed(self):
        r = self.worker("fork=group", "fork=setsid", "fork=orphan", "@1:sleep=0.3", "@1:exit=4", "hang", nproc=2)
        self.assertEqual(r.code, 4, r)
        # tearDown asserts that nothing descended from this test is left.

    def test_processes_left_by_successful_workers_are_cleaned_up(self):
        r = self.worker("fork=setsid", "fork=orphan", "print=done", nproc=2, extra=("--term-timeout", "2"))
        self.assertEqual(r.code, 0, r)

    def test_sigkill_of_ddprun_takes_its_workers_along(self):
        pidfile = self.path("pids")
        proc = self.start("--nproc-per-node", 3, WORKER, f"pidfile={pidfile}", f"ready={self.tmp}", "hang")
        self.wait_for_files([self.path(f"ready.{i}") for i in range(3)])
        pids = self.read_pids(pidfile)
        proc.kill()
        proc.communicate()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(pid_alive(p) for p, _ in pids.values()):
            time.sleep(0.01)
        for rank, (pid, _) in pids.items():
            self.assertFalse(pid_alive(pid), f"rank {rank} outlived a SIGKILLed ddprun")

    def test_summary_lists_every_worker_and_events_file_records_the_lifecycle(self):
        events = self.path("events.jsonl")
        r = self.worker("@1:errorfile=ValueError: boom", "@1:exit=2", "hang", nproc=3,
                        extra=("--events-file", events))
        self.assertEqual(r.code, 2, r)
        err = r.stderr.decode()
        self.assertIn("root cause error: ValueError: boom", err)
        ev = self.events(events)
        kinds = [e["event"] for e in ev]
        self.assertEqual(kinds.count("started"), 3)
        self.assertEqual(kinds.count("exited"), 3)
        self.assertEqual(kinds.count("teardown"), 1)
        self.assertEqual(kinds[-1], "summary")
        summary = ev[-1]
        self.assertEqual(summary["exit_code"], 2)
        self.assertEqual(summary["root_cause"]["rank"], 1)
        self.assertEqual(summary["root_cause"]["error"], "ValueError: boom")
        self.assertEqual(sorted(w["state"] for w in summary["workers"]), ["failed", "victim", "victim"])

    def test_teardown_is_event_driven_not_polled(self):
        events = self.path("events.jsonl")
        r = self.worker("@1:sleep=0.2", "@1:exit=3", "hang", nproc=4, extra=("--events-file", events))
        self.assertEqual(r.code, 3, r)
        ev = self.events(events)
        failed = next(e for e in ev if e["event"] == "exited" and e["state"] == "failed")
        last = max(e["time_ms"] for e in ev if e["event"] == "exited")
        # Generous bound for a shared CI machine; the benchmark measures the real figure.
        self.assertLess(last - failed["time_ms"], 1000, ev)
