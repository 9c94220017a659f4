"""The Python helper's stop request and error file (python/ddprun_heartbeat.py: handle_stop_signals, stop_requested,
record) with plain Python workers (/usr/bin/python3, no torch) under ddprun, and what importing it leaves alone.
PYTHONPATH names this checkout's python/ first, so the copy tested is this one, not the build tree's."""
import json
import os
import signal
import subprocess
import textwrap
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import PREEMPTED
from harness import DdprunTestCase, Result

PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../python"))
PYTHON = "/usr/bin/python3"

# Rank 1 raises in a function below main; rank 0 would sleep on, so it is torn down as a victim.
FAILING = """
    import os, sys, time
    import ddprun_heartbeat

    def load_shard(rank):
        if rank == 1:
            raise ValueError("shard 7 of rank 1 is corrupt")
        time.sleep(60)

    def main():
        load_shard(int(os.environ["RANK"]))
        return 0

    if __name__ == "__main__":
        if "--record" in sys.argv:
            main = ddprun_heartbeat.record(main)
        sys.exit(main())
"""

# A training loop that checks the stop request at every step boundary, "saves" (a file naming the step and the
# signal) and exits 0. After 60 s it gives up with exit 3, so a lost signal fails the test instead of hanging it.
LOOP = """
    import os, sys, time
    import ddprun_heartbeat

    out, rank = sys.argv[1], os.environ["RANK"]
    if "--no-handler" not in sys.argv:
        ddprun_heartbeat.handle_stop_signals()
    open(os.path.join(out, f"ready.{rank}"), "w").close()
    for step in range(1, 1201):
        time.sleep(0.05)  # a training step
        if ddprun_heartbeat.stop_requested():
            by = ddprun_heartbeat.stop_signal().name
            with open(os.path.join(out, f"saved.{rank}"), "w") as f:
                f.write(f"{step} {by}")
            print(f"rank {rank}: stop requested by {by}: saved step {step}", flush=True)
            sys.exit(0)
    sys.exit(3)
"""

# Prints, as JSON, each signal's disposition (SigCgt and SigIgn of /proc/self/status, and what signal.getsignal
# says) before `import ddprun_heartbeat`, after it, and after handle_stop_signals().
DISPOSITIONS = """
    import json, os, signal

    def dispositions():
        with open("/proc/self/status") as f:
            masks = dict(line.split(":", 1) for line in f if line.startswith(("SigCgt", "SigIgn")))
        handlers = {s.name: str(signal.getsignal(s)) for s in signal.Signals
                    if s not in (signal.SIGKILL, signal.SIGSTOP)}
        return {"caught": int(masks["SigCgt"], 16), "ignored": int(masks["SigIgn"], 16), "handlers": handlers}

    before = dispositions()
    import ddprun_heartbeat
    after = dispositions()
    ddprun_heartbeat.handle_stop_signals()
    print(json.dumps({"before": before, "after": after, "handled": dispositions(),
                      "stacks_signal": int(os.environ.get("DDPRUN_STACKS_SIGNAL", "0"))}))
"""


def bit(sig):
    return 1 << (int(sig) - 1)  # /proc/PID/status masks: signal N is bit N-1


class PythonHelpers(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.env["PYTHONPATH"] = PYTHON_DIR + (":" + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
        self.env["PYTHON_EXEC"] = PYTHON
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ left in the source tree's python/
        # A test chooses whether it runs as a SLURM job (ddprun's exit 79 depends on it) and with which error file;
        # outside ddprun, the helper must not find a heartbeat channel this process may have been given.
        channel = {"DDPRUN_HEARTBEAT_FD", "DDPRUN_HEARTBEAT_OFFSET", "DDPRUN_STACKS_FILE", "DDPRUN_STACKS_SIGNAL"}
        for name in [n for n in self.env if n.startswith(("SLURM_", "TORCHELASTIC_")) or n in channel]:
            del self.env[name]

    def script(self, name, body):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(body))
        return path

    def python(self, *args, env=None):
        """Runs a script with the helper, outside ddprun."""
        return subprocess.run([PYTHON, *args], env=env or self.env, cwd=self.tmp, capture_output=True, text=True,
                              timeout=60)

    # --- record: the error file

    def test_record_makes_the_exception_the_root_cause_error_in_the_summary(self):
        failing = self.script("failing.py", FAILING)
        plain = self.run_ddprun("--nproc-per-node", 2, failing)
        self.assertEqual(plain.code, 1, plain)
        self.assertIn("ddprun: root cause: rank 1 ", plain.stderr.decode(), plain)
        # Without an error file the summary reads the exception from the rank's stderr, on its node only; with
        # record it comes from the error file, which the rendezvous carries to every node.
        self.assertIn("ddprun: root cause error (rank 1's stderr): ValueError", plain.stderr.decode(), plain)
        self.assertNotIn("ddprun: root cause error: ", plain.stderr.decode(), plain)

        logs = self.path("logs")
        t0 = int(time.time())
        res = self.run_ddprun("--nproc-per-node", 2, "--log-dir", logs, failing, "--record")
        t1 = int(time.time()) + 1
        self.assertEqual(res.code, 1, res)  # Python's own exit code for an uncaught exception
        err = res.stderr.decode()
        self.assertIn("ddprun: root cause: rank 1 ", err, res)
        self.assertIn("ddprun: root cause error: ValueError: shard 7 of rank 1 is corrupt\n", err, res)
        # The traceback's frames are the program's: main and load_shard, not the decorator's wrapper.
        self.assertIn("ddprun: root cause traceback (rank 1, last 2 of 2 frames):\n", err, res)
        self.assertRegex(err, r'ddprun: \|   File ".*failing\.py", line \d+, in load_shard\n', res)
        shown = [line for line in err.splitlines() if line.startswith("ddprun: | ")]
        self.assertFalse([line for line in shown if "ddprun_heartbeat.py" in line], res)
        # Python's own handler still printed the whole traceback on the worker's stderr.
        self.assertIn("[rank1]: ValueError: shard 7 of rank 1 is corrupt", res.text(), res)

        files = [line.split(": ", 2)[2] for line in err.splitlines() if line.startswith("ddprun: full error file: ")]
        self.assertEqual(len(files), 1, res)
        with open(files[0]) as f:
            data = json.load(f)
        self.assertEqual(list(data), ["message"])
        self.assertEqual(sorted(data["message"]), ["extraInfo", "message"])
        self.assertEqual(data["message"]["message"], "ValueError: shard 7 of rank 1 is corrupt")
        extra = data["message"]["extraInfo"]
        self.assertEqual(sorted(extra), ["py_callstack", "timestamp"])
        self.assertTrue(extra["py_callstack"].startswith("Traceback (most recent call last):\n"), extra)
        self.assertTrue(extra["py_callstack"].endswith("ValueError: shard 7 of rank 1 is corrupt\n"), extra)
        self.assertIsInstance(extra["timestamp"], str)  # torch writes str(int(time.time()))
        self.assertTrue(t0 <= int(extra["timestamp"]) <= t1, (t0, extra["timestamp"], t1))
        # Rank 0 was killed by the teardown's SIGTERM, with no exception: it wrote nothing.
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(os.path.dirname(files[0])), "0", "error.json")))

    def test_record_outside_a_launcher_and_what_it_lets_through(self):
        code = self.script("main.py", """
            import sys, ddprun_heartbeat

            @ddprun_heartbeat.record
            def main(what):
                if what == "raise":
                    raise KeyError("no such shard")
                if what == "exit":
                    sys.exit(3)
                return 7

            sys.exit(main(sys.argv[1]))
        """)
        error_file = self.path("error.json")
        with_file = dict(self.env, TORCHELASTIC_ERROR_FILE=error_file)
        # No TORCHELASTIC_ERROR_FILE: an exception is Python's as ever (traceback, exit 1), nothing is written.
        r = self.python(code, "raise")
        self.assertEqual(r.returncode, 1, r)
        self.assertTrue(r.stderr.endswith("KeyError: 'no such shard'\n"), r.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["main.py"])
        # A return value and SystemExit pass through, unrecorded.
        for what, status in (("return", 7), ("exit", 3)):
            r = self.python(code, what, env=with_file)
            self.assertEqual((r.returncode, r.stderr), (status, ""), what)
            self.assertFalse(os.path.exists(error_file), what)
        # A file already there is replaced, as torch's @record replaces it.
        with open(error_file, "w") as f:
            f.write("written earlier")
        r = self.python(code, "raise", env=with_file)
        self.assertEqual(r.returncode, 1, r)
        with open(error_file) as f:
            self.assertEqual(json.load(f)["message"]["message"], "KeyError: 'no such shard'")
        # A file that cannot be written is said in one line; the exception still ends the process as it would.
        r = self.python(code, "raise", env=dict(self.env, TORCHELASTIC_ERROR_FILE=self.path("missing/error.json")))
        self.assertEqual(r.returncode, 1, r)
        self.assertIn("ddprun_heartbeat: could not write the error file " + self.path("missing/error.json"), r.stderr)
        self.assertTrue(r.stderr.endswith("KeyError: 'no such shard'\n"), r.stderr)

    # --- the stop request

    def stop_job(self, sig, *args, slurm=False):
        """A 2-rank job of LOOP; `sig` goes to ddprun once both ranks are in their loop. Returns the Result and what
        each rank saved ({rank: "step SIGNAME"})."""
        if slurm:  # a one-node SLURM batch job, as ddprun sees it: no step, so signals are forwarded
            self.env.update(SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="1")
        loop = self.script("loop.py", LOOP)
        t0 = time.monotonic()
        proc = self.start("--nproc-per-node", 2, loop, self.tmp, *args)
        try:
            self.wait_for_files([self.path("ready.0"), self.path("ready.1")], timeout=30)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        saved = {}
        for rank in (0, 1):
            if os.path.exists(self.path(f"saved.{rank}")):
                with open(self.path(f"saved.{rank}")) as f:
                    saved[rank] = f.read()
        return Result(proc, out, err, time.monotonic() - t0), saved

    def assert_stopped_cleanly(self, res, saved, sig):
        self.assertEqual(sorted(saved), [0, 1], res)
        for rank, what in saved.items():
            self.assertRegex(what, rf"^\d+ {sig.name}$")
            self.assertIn(f"[rank{rank}]: rank {rank}: stop requested by {sig.name}: saved", res.stdout.decode(), res)
        err = res.stderr.decode()  # every worker exited 0: a table of two, or no table at all
        self.assertTrue(err.count("succeeded exit code 0") == 2 or "INFO: all 2 workers succeeded in" in err, res)
        self.assertLess(res.elapsed, 30)  # at the next step boundary, not at the end of the grace period

    def test_sigterm_saves_and_exits_0_and_ddprun_exits_143(self):
        res, saved = self.stop_job(signal.SIGTERM)
        self.assert_stopped_cleanly(res, saved, signal.SIGTERM)
        self.assertEqual(res.code, 128 + signal.SIGTERM, res)  # outside SLURM: the job was stopped, 128+N
        self.assertIn("received SIGTERM", res.stderr.decode(), res)

    def test_sigterm_in_a_slurm_job_is_preempted_79(self):
        res, saved = self.stop_job(signal.SIGTERM, slurm=True)
        self.assert_stopped_cleanly(res, saved, signal.SIGTERM)
        # 79 as the README says, and a summary that says so (it read "job FAILED", with ddprun's SIGTERM as the
        # root cause, above that exit code).
        self.assertEqual(res.code, PREEMPTED, res)
        self.assertIn("ddprun: job preempted after", res.stderr.decode(), res)
        self.assertNotIn("FAILED", res.stderr.decode(), res)

    def test_a_sigusr1_notice_in_a_slurm_job_is_preempted_79_and_outside_one_succeeds(self):
        res, saved = self.stop_job(signal.SIGUSR1, slurm=True)
        self.assert_stopped_cleanly(res, saved, signal.SIGUSR1)
        self.assertEqual(res.code, PREEMPTED, res)
        self.assertIn("ddprun: job preempted after", res.stderr.decode(), res)
        for rank in (0, 1):
            os.remove(self.path(f"ready.{rank}"))
            os.remove(self.path(f"saved.{rank}"))
        for name in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES"):
            del self.env[name]
        res, saved = self.stop_job(signal.SIGUSR1)
        self.assert_stopped_cleanly(res, saved, signal.SIGUSR1)
        self.assertEqual(res.code, 0, res)  # a notice only: every worker exited 0, the job succeeded

    def test_without_handle_stop_signals_the_notice_kills_as_before(self):
        res, saved = self.stop_job(signal.SIGUSR1, "--no-handler")
        self.assertEqual(saved, {}, res)
        self.assertEqual(res.code, 128 + signal.SIGUSR1, res)  # the root cause was killed by SIGUSR1
        self.assertIn("signal 10 (SIGUSR1)", res.stderr.decode(), res)

    def test_a_child_forked_after_handle_stop_signals_still_dies_by_sigterm(self):
        # A DataLoader worker forked from the main process never checks the flag: SIGTERM must still end it.
        code = self.script("fork.py", """
            import os, signal, sys, time, ddprun_heartbeat
            ddprun_heartbeat.handle_stop_signals()
            up, ready = os.pipe()
            child = os.fork()
            if child == 0:  # up and running first: a signal that comes while fork() returns is dropped by Python
                os.write(ready, b"1")
                time.sleep(30)
                os._exit(0)
            os.read(up, 1)
            os.kill(child, signal.SIGTERM)
            _, status = os.waitpid(child, 0)
            print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, ddprun_heartbeat.stop_requested())
            os.kill(os.getpid(), signal.SIGTERM)  # the parent itself only records the request
            print(ddprun_heartbeat.stop_requested(), ddprun_heartbeat.stop_signal().name)
        """)
        r = self.python(code)
        self.assertEqual((r.returncode, r.stdout), (0, "True False\nTrue SIGTERM\n"), r)

    # --- the import

    def dispositions(self, res):
        """The DISPOSITIONS of each rank of a ddprun run."""
        self.assertEqual(res.code, 0, res)
        lines = res.stdout.decode().splitlines()
        self.assertEqual(len(lines), 2, res)
        return [json.loads(line.split(": ", 1)[1]) for line in lines]

    def assert_import_changed_only(self, d, signals):
        expected = sum(bit(s) for s in signals)
        self.assertEqual(d["after"]["caught"] ^ d["before"]["caught"], expected, d)
        self.assertEqual(d["after"]["ignored"], d["before"]["ignored"], d)
        self.assertEqual(d["after"]["handlers"], d["before"]["handlers"], d)  # faulthandler's is not a Python one
        # handle_stop_signals() catches SIGTERM and SIGUSR1, and nothing else.
        self.assertEqual(d["handled"]["caught"] ^ d["after"]["caught"], bit(signal.SIGTERM) | bit(signal.SIGUSR1), d)
        changed = {n for n, h in d["handled"]["handlers"].items() if h != d["after"]["handlers"][n]}
        self.assertEqual(changed, {"SIGTERM", "SIGUSR1"}, d)

    def test_importing_the_helper_changes_no_signal_disposition(self):
        script = self.script("dispositions.py", DISPOSITIONS)
        r = self.python(script)  # no launcher
        self.assertEqual(r.returncode, 0, r)
        self.assert_import_changed_only(json.loads(r.stdout), [])
        for d in self.dispositions(self.run_ddprun("--nproc-per-node", 2, script)):
            self.assert_import_changed_only(d, [])
        # The one exception, by design: under --hang-timeout the import registers faulthandler for the stacks signal.
        for d in self.dispositions(self.run_ddprun("--nproc-per-node", 2, "--hang-timeout", 30, script)):
            self.assertGreater(d["stacks_signal"], 0, d)
            self.assert_import_changed_only(d, [d["stacks_signal"]])

    # --- the exit: a quiet phase

    def test_a_rank_whose_exit_outlasts_the_hang_timeout_is_not_hung(self):
        """The program beats and returns; a handler registered before the helper's import (as torch's are) takes
        3 s, 3x --hang-timeout 1. The helper's exit quiet phase (EXIT_QUIET_S) covers it: 0. Before, 78."""
        script = self.script("slow_exit.py", """
            import atexit, time
            atexit.register(time.sleep, 3)
            import ddprun_heartbeat
            ddprun_heartbeat.beat(1)
        """)
        r = self.run_ddprun("--nproc-per-node", 2, "--hang-timeout", 1, script)
        self.assertEqual(r.code, 0, r)


if __name__ == "__main__":
    unittest.main()
