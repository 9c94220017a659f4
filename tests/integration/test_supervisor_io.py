"""ddprun's own files and environment: a disk that fills, an events file that is a FIFO, files in a shared
directory another user could plant things in, too few file descriptors, signals ignored by nohup. Each
case checks the exit code, that the loss or refusal is said in one line, and (harness) that nothing is left."""
import glob
import json
import os
import signal
import stat
import subprocess
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import CANT_CREATE, HUNG, OS_ERROR
from harness import DDPRUN, DdprunTestCase, WORKER, pid_alive
from stalled_console import line_numbers, without_cut_last_line
from wait import wait_until


class SmallDisk(DdprunTestCase):
    """A 1 MiB tmpfs (needs root, or CAP_SYS_ADMIN, to mount)."""

    def setUp(self):
        super().setUp()
        self.disk = self.path("disk")
        os.mkdir(self.disk)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", self.disk], capture_output=True)
        if res.returncode != 0:
            raise unittest.SkipTest(f"cannot mount a small tmpfs here (needs root): {res.stderr.decode().strip()}")

    def tearDown(self):
        subprocess.run(["umount", "-l", self.disk], capture_output=True)
        super().tearDown()

    def test_a_full_log_disk_is_said_at_once_and_in_the_summary(self):
        events = self.path("events.jsonl")  # on the big disk
        res = self.worker("lines=40000", extra=("--log-dir", self.disk, "--tee", 3, "--events-file", events))
        self.assertEqual(res.code, 0, res)  # the job itself succeeded; its logs did not
        err = res.stderr.decode()
        self.assertIn("cannot write a log file: rank", err, res)
        self.assertIn("No space left on device", err, res)
        self.assertIn("output lost: rank", err, res)  # the summary repeats it
        failed = [e for e in self.events(events) if e["event"] == "log_write_failed"]
        self.assertGreaterEqual(len(failed), 1)
        self.assertGreater(failed[0]["bytes_written"], 0)
        summary = self.events(events)[-1]
        self.assertEqual(summary["event"], "summary")
        self.assertTrue(summary["output_lost"])
        # The console (the test's pipe) still got every line of both ranks.
        out = res.stdout.decode()
        for rank in (0, 1):
            self.assertEqual(out.count(f"[rank{rank}]: rank {rank} line "), 40000)

    def test_a_full_events_disk_is_exit_73_with_whole_lines_only(self):
        events = os.path.join(self.disk, "events.jsonl")
        filler = os.path.join(self.disk, "filler")
        with open(filler, "wb") as f:  # leave ~2 KiB: the first events fit, the rest do not
            try:
                f.write(b"x" * (1024 * 1024 - 2048))
            except OSError:
                pass
        res = self.worker("lines=10", nproc=8, extra=("--events-file", events))
        self.assertEqual(res.code, CANT_CREATE, res)
        self.assertIn("events file", res.stderr.decode())
        with open(events) as f:
            lines = f.read().splitlines()
        for line in lines:
            json.loads(line)  # every line whole


class Files(DdprunTestCase):
    def test_an_events_fifo_is_refused_at_once(self):
        fifo = self.path("events.fifo")
        os.mkfifo(fifo)
        res = self.worker("print=never", extra=("--events-file", fifo), nproc=1)
        self.assertEqual(res.code, CANT_CREATE, res)
        self.assertIn("not a regular file", res.stderr.decode())
        self.assertNotIn(b"never", res.stdout)  # no worker started
        self.assertLess(res.elapsed, 5)

    def test_hang_stacks_stay_in_the_private_run_directory(self):
        """Without --log-dir nothing is made under a predictable name in the shared $TMPDIR: the stacks are
        in the 0700 run directory, mode 0600, and stay there after the run."""
        res = self.worker("beat=1", "hang", nproc=1, extra=("--hang-timeout", 1))
        self.assertEqual(res.code, HUNG, res)  # README "Exit codes": a hang
        entries = os.listdir(self.tmp)
        run_dirs = [e for e in entries if e.startswith("ddprun-")]
        self.assertEqual(len(run_dirs), 1, entries)  # nothing beside it
        run_dir = os.path.join(self.tmp, run_dirs[0])
        self.assertEqual(stat.S_IMODE(os.stat(run_dir).st_mode), 0o700)
        stacks = os.path.join(run_dir, "attempt_0", "hang_stacks.txt")
        self.assertEqual(stat.S_IMODE(os.stat(stacks).st_mode), 0o600)
        self.assertIn(stacks, res.stderr.decode())
        self.assertEqual(sorted(os.listdir(os.path.join(run_dir, "attempt_0"))), ["hang_stacks.txt"])


class LogDirLinks(DdprunTestCase):
    def test_the_log_dir_copy_replaces_a_planted_link_and_leaves_its_target_alone(self):
        """Issue 33: at the end ddprun copies its work tree (the error files) into --log-dir. A link a worker (or
        anyone of the same uid) planted where error.json goes was written through: a root ddprun overwrote the
        link's target. Now the link is replaced by the copy, and its target is untouched."""
        logs, victim, go = self.path("logs"), self.path("victim"), self.path("go")
        with open(victim, "w") as f:
            f.write("precious\n")
        proc = self.start("--nproc-per-node", 1, "--log-dir", logs, WORKER, f"waitfile={go}", "errorfile=boom", "exit=1")
        root = wait_until(lambda: glob.glob(os.path.join(logs, "*")), "the log tree", 20)[0]
        rank_dir = os.path.join(root, "attempt_0", "0")  # made by the copy at the end, unless it is there already
        os.makedirs(rank_dir, exist_ok=True)
        planted = os.path.join(rank_dir, "error.json")
        os.symlink(victim, planted)
        open(go, "w").close()
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 1, err)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious\n")
        self.assertFalse(os.path.islink(planted))
        with open(planted) as f:
            self.assertIn("boom", f.read())


class Environment(DdprunTestCase):
    def test_too_few_file_descriptors_is_71_naming_the_limit(self):
        if "ASAN_OPTIONS" in os.environ:  # scripts/test --sanitize
            self.skipTest("UBSan's vptr check probes memory through a pipe of its own: with every descriptor "
                          "used up it reports a false 'invalid vptr' and exits 1 (seen in scripts/test --sanitize)")
        def low_limit():
            import resource
            resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "16", "--log-dir", self.path("logs"), "--tee", "3",
                                 WORKER, "sleep=5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                preexec_fn=low_limit, start_new_session=True)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, OS_ERROR, err.decode())
        self.assertIn("Too many open files: this process may open only 40 files (ulimit -n)", err.decode())
        self.assertRegex(err.decode(), r"root cause: rank \d+ \(local rank \d+, node 0, host [^)]*\) could not be "
                                       r"started \(exit code 71\): .*Too many open files")
        self.assertNotIn("internal error", err.decode())

    def test_a_signal_ignored_at_start_stays_ignored_for_ddprun_and_its_workers(self):
        """nohup ddprun ...: the terminal's SIGHUP neither stops the job nor reaches a worker as fatal."""
        pidfile = self.path("pids")
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2",
                                 WORKER, f"pidfile={pidfile}", "sleep=2"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        self.wait_for_files([pidfile])
        wait_until(lambda: len(self.read_pids(pidfile)) >= 2, "both workers' pids", 10)
        for pid, _ in self.read_pids(pidfile).values():
            with open(f"/proc/{pid}/status") as f:
                ignored = int(next(l for l in f if l.startswith("SigIgn:")).split()[1], 16)
            self.assertTrue(ignored & (1 << (signal.SIGHUP - 1)), "the worker must inherit SIGHUP ignored")
        os.killpg(proc.pid, signal.SIGHUP)  # ddprun's group: as a closing terminal does
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err.decode())


class HungFileSystem(DdprunTestCase):
    """--log-dir on a file system that stops answering (tests/support/slow_fs.py: writes wait while a gate
    file exists, as on a hard-mounted NFS whose server is gone). Needs /dev/fuse, root and python3-fusepy."""

    def setUp(self):
        super().setUp()
        self.mnt, self.back, self.gate = self.path("mnt"), self.path("back"), self.path("gate")
        os.mkdir(self.mnt)
        os.mkdir(self.back)
        if not os.path.exists("/dev/fuse"):
            raise unittest.SkipTest("no /dev/fuse here: cannot make a file system that hangs")
        if subprocess.run(["/usr/bin/python3", "-c", "import fusepy"], capture_output=True).returncode != 0:
            raise unittest.SkipTest("python3-fusepy is not installed (scripts/setup installs it)")
        self.fs = subprocess.Popen(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "../support/slow_fs.py"),
                                    self.mnt, self.back, self.gate], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10  # not wait_until: at the bound (or the server's exit) this skips, not fails
        while not os.path.ismount(self.mnt):
            if self.fs.poll() is not None or time.monotonic() > deadline:
                err = self.fs.stderr.read().decode() if self.fs.poll() is not None else "no mount after 10 s"
                self.fs.kill()
                self.fs.wait()
                self.fs.stderr.close()
                raise unittest.SkipTest(f"cannot mount a FUSE file system here: {err.strip()[-300:]}")
            time.sleep(0.02)

    def tearDown(self):
        if os.path.exists(self.gate):
            os.remove(self.gate)
        subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        try:
            self.fs.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fs.kill()
            self.fs.wait()
        self.fs.stderr.close()
        super().tearDown()

    def start_failing_job(self, *where):
        ready = self.path("ready")
        os.mkdir(ready)
        go = self.path("go")
        where = where or ("--log-dir", self.mnt, "--tee", "3")
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2", *where, WORKER,
                                 f"pidfile={self.path('pids')}", f"ready={ready}", "@0:lines=500000", "@0:hang",
                                 f"@1:waitfile={go}", "@1:exit=3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env, start_new_session=True)
        self.wait_for_files([os.path.join(ready, "ready.0"), os.path.join(ready, "ready.1")])
        pids = [pid for pid, _ in self.read_pids(self.path("pids")).values()]
        with open(self.gate, "w"):
            pass  # from now on every write to the log directory hangs
        time.sleep(0.3)
        with open(go, "w"):
            pass
        wait_until(lambda: not any(pid_alive(p) for p in pids),
                   lambda: f"the workers to be gone while the log disk hangs (the teardown waited for the hung file "
                           f"system): {[p for p in pids if pid_alive(p)]} alive", 5)
        return proc

    def test_a_failure_is_torn_down_while_the_log_disk_hangs_and_the_logs_are_whole_after(self):
        proc = self.start_failing_job()
        time.sleep(0.5)
        self.assertIsNone(proc.poll(), "ddprun must wait for the log files, not drop them")
        os.remove(self.gate)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 3, err.decode())
        self.assertIn(b"root cause: rank 1", err)
        # The worker is killed in the middle of a write: its cut last line is its own loss, in both places.
        shown = len(without_cut_last_line(line_numbers(out.decode(), 0)))
        logs = [os.path.join(d, "stdout.log") for d, _, files in os.walk(self.mnt) if d.endswith("/0")]
        with open(logs[0]) as f:
            numbers = without_cut_last_line([int(l.split()[-1]) for l in f if l.startswith("rank 0 line ")])
        self.assertEqual(numbers, list(range(len(numbers))), "the log has a gap")
        self.assertEqual(len(numbers), shown, "the log and the console must hold the same lines")

    def test_a_stop_signal_gives_up_on_a_hung_log_disk_and_says_what_was_not_written(self):
        """The summary and the exit code come at once. The process itself can only be reaped once its writer
        thread's write(2) returns: the kernel holds a thread in a request to a hung FUSE or hard NFS mount
        (D state), SIGKILL or not; so the gate opens only after the summary was read."""
        proc = self.start_failing_job()
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        err = self.stderr_until(proc, b"ddprun: exit code 3", 5, why="no summary 5 s after SIGTERM")
        self.assertIn(b"given up on the file system", err)
        self.assertIn(b"output lost: rank 0's", err)
        os.remove(self.gate)
        proc.stdout.close()
        proc.stderr.close()
        self.assertEqual(proc.wait(timeout=30), 3)  # the job's outcome stands

    def test_a_restart_while_the_log_disk_hangs_still_answers_a_signal(self):
        """The next attempt's log directories and files are made by the files' own threads, the error files
        live on a local private tree: while mkdir(2) and open(2) hang on the log file system, the restart
        runs and a SIGTERM still ends the job with its summary at once."""
        ready, go = self.path("ready"), self.path("go")
        os.mkdir(ready)
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2", "--log-dir", self.mnt, "--tee", "3",
                                 "--max-restarts", "1", WORKER, f"ready={ready}", f"@1:?{go}:waitfile={go}",
                                 f"@1:?{go}:exit=3", "hang"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env, start_new_session=True)
        self.wait_for_files([os.path.join(ready, "ready.0"), os.path.join(ready, "ready.1")])
        with open(self.gate, "w"):
            pass  # from now on every mkdir, create and write on the log file system hangs
        with open(go, "w"):
            pass  # rank 1 exits 3: the job restarts, and attempt_1's log directories cannot be made
        err = self.stderr_until(proc, b"restart", 10, why="no restart")
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        err = self.stderr_until(proc, b"ddprun: exit code", 5, seen=err,
                                why="no summary 5 s after SIGTERM: the loop waits on the hung file system")
        self.assertIn(b"SIGTERM", err)
        os.remove(self.gate)
        proc.stdout.close()
        proc.stderr.close()
        self.assertNotEqual(proc.wait(timeout=30), 0)

    def test_an_events_file_on_a_hung_disk_does_not_hold_the_teardown_and_is_whole_after(self):
        events = os.path.join(self.mnt, "events.jsonl")
        proc = self.start_failing_job("--events-file", events)
        os.remove(self.gate)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 3, err.decode())
        lines = self.events(events)
        self.assertEqual(lines[-1]["event"], "summary")
        self.assertIn("teardown", [e["event"] for e in lines])
