"""Failure semantics on one node: the first failure tears everything down, exit codes are exact."""
import os
import re
import signal
import subprocess
import sys
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import NOT_EXECUTABLE, NOT_FOUND
from harness import DDPRUN, DdprunTestCase, WORKER, pid_alive
from wait import wait_until


def _own_cgroup_dir(version):
    """This process's cgroup directory: cgroup v2's, or cgroup v1's memory controller's; None if not mounted."""
    path = None
    with open("/proc/self/cgroup") as f:
        for line in f:
            hierarchy, controllers, where = line.rstrip("\n").split(":", 2)
            if (version == 2 and hierarchy == "0" and controllers == "") or \
                    (version == 1 and "memory" in controllers.split(",")):
                path = where
    if path is None:
        return None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, rest = line.split(" - ", 1)
            fstype, _, options = rest.split()[:3]
            root, point = fields.split()[3:5]
            if (version == 2 and fstype == "cgroup2") or (version == 1 and fstype == "cgroup" and
                                                          "memory" in options.split(",")):
                if not path.startswith(root):
                    continue
                return point + path[len(root.rstrip("/")):].rstrip("/")
    return None


def make_memory_cgroup(name, limit):
    """A new memory cgroup `name` below this process's own, limited to `limit` bytes, swap off where that can
    be set: (its directory, the limit file's name). Raises SkipTest saying why where none can be made."""
    why = []
    for version, limit_file, swap_file, swap_value in ((2, "memory.max", "memory.swap.max", "0"),
                                                        (1, "memory.limit_in_bytes", "memory.swappiness", "0")):
        own = _own_cgroup_dir(version)
        if own is None:
            why.append(f"no cgroup v{version} memory hierarchy")
            continue
        path = os.path.join(own, name)
        try:
            os.mkdir(path)
        except OSError as e:
            why.append(f"cannot create {path}: {e.strerror}")
            continue
        try:
            with open(os.path.join(path, limit_file), "w") as f:
                f.write(str(limit))
        except OSError as e:
            os.rmdir(path)  # no memory controller there (cgroup v2 without it delegated), or not ours to set
            why.append(f"cannot set {limit_file} in {path}: {e.strerror}")
            continue
        try:
            with open(os.path.join(path, swap_file), "w") as f:
                f.write(swap_value)
        except OSError:
            pass  # no swap accounting: a machine without swap needs none
        return path, limit_file
    raise unittest.SkipTest("no memory cgroup with a limit can be made here (" + "; ".join(why) + ")")


def remove_cgroup(path):
    for _ in range(100):  # the last processes may take a moment to leave it
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.05)


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
            self.assertNotIn("OOM killer", r.stderr.decode(), r)  # only the kernel's kills say so

    def test_program_that_fails_to_exec_at_run_time_gives_127(self):
        # Passes validation (an executable file), but execve fails: its interpreter does not exist.
        script = self.path("bad_interp")
        with open(script, "w") as f:
            f.write("#!/nonexistent/interpreter\n")
        os.chmod(script, 0o755)
        r = self.run_ddprun("--nproc-per-node", 2, script)
        self.assertEqual(r.code, NOT_FOUND, r)
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
        self.assertEqual(r.code, NOT_EXECUTABLE, r)
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
        wait_until(lambda: not any(pid_alive(p) for p, _ in pids.values()),
                   lambda: f"every rank gone, not ranks {[r for r, (p, _) in pids.items() if pid_alive(p)]}: they "
                           "outlived a SIGKILLed ddprun", 5)

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


class OomKill(DdprunTestCase):
    """A worker the kernel's OOM killer ends is named as such, with the memory limit it ran into."""

    def test_a_worker_over_its_memory_limit_is_reported_as_killed_by_the_oom_killer(self):
        if "ASAN_OPTIONS" in os.environ:  # scripts/test --sanitize
            self.skipTest("an AddressSanitizer ddprun shares the 96 MiB limit and can outgrow the rank that fills it, "
                          "so the OOM killer may pick ddprun itself (seen in scripts/test --sanitize)")
        limit = 96 << 20
        cgroup, limit_file = make_memory_cgroup(f"ddprun-oom-test-{os.getpid()}", limit)
        self.addCleanup(remove_cgroup, cgroup)

        def enter_cgroup():  # ddprun, and so its workers, run inside the limit
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write("0")

        def run(*args):
            proc = subprocess.Popen([DDPRUN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, env=self.env, start_new_session=True,
                                    preexec_fn=enter_cgroup)
            out, err = proc.communicate(timeout=60)
            return proc.returncode, err.decode()

        events = self.path("events")
        grow = "import os, time\nif os.environ['RANK'] == '1': data = b'x' * (1 << 30)\ntime.sleep(60)\n"
        code, err = run("--nproc-per-node", 2, "--events-file", events, sys.executable, "-c", grow)
        self.assertEqual(code, 137, err)  # still the signal's code: the reason is in the words
        self.assertRegex(err, r"root cause: rank 1 \(local rank 1, node 0, host [^)]*, pid \d+\) was killed by signal 9 "
                              r"\(SIGKILL\): killed by the kernel's OOM killer: memory limit 96\.0 MiB, set by " +
                         re.escape(f"{limit_file} of {cgroup}") + " at ")
        exited = [e for e in self.events(events) if e["event"] == "exited" and e["rank"] == 1]
        self.assertTrue(exited[0]["reason"].startswith("killed by the kernel's OOM killer: memory limit 96.0 MiB"),
                        exited)
        # A SIGKILL from anyone else, under the same limit, is only a SIGKILL.
        code, err = run("--nproc-per-node", 2, WORKER, "@1:kill=KILL", "@0:hang")
        self.assertEqual(code, 137, err)
        self.assertIn("root cause: rank 1", err)
        self.assertNotIn("OOM", err)
