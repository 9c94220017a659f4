"""ddprun's own files and environment: a disk that fills, an events file that is a FIFO, files in a shared
directory another user could plant things in, too few file descriptors, signals ignored by nohup. Each
case checks the exit code, that the loss or refusal is said in one line, and (harness) that nothing is left."""
import json
import os
import signal
import stat
import subprocess
import unittest

from harness import DDPRUN, DdprunTestCase, WORKER

OS_ERROR, CANT_CREATE = 71, 73


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
        self.assertEqual(res.code, 137, res)
        entries = os.listdir(self.tmp)
        run_dirs = [e for e in entries if e.startswith("ddprun-")]
        self.assertEqual(len(run_dirs), 1, entries)  # nothing beside it
        run_dir = os.path.join(self.tmp, run_dirs[0])
        self.assertEqual(stat.S_IMODE(os.stat(run_dir).st_mode), 0o700)
        stacks = os.path.join(run_dir, "attempt_0", "hang_stacks.txt")
        self.assertEqual(stat.S_IMODE(os.stat(stacks).st_mode), 0o600)
        self.assertIn(stacks, res.stderr.decode())
        self.assertEqual(sorted(os.listdir(os.path.join(run_dir, "attempt_0"))), ["hang_stacks.txt"])


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
        self.assertNotIn("internal error", err.decode())

    def test_a_signal_ignored_at_start_stays_ignored_for_ddprun_and_its_workers(self):
        """nohup ddprun ...: the terminal's SIGHUP neither stops the job nor reaches a worker as fatal."""
        pidfile = self.path("pids")
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", "2",
                                 WORKER, f"pidfile={pidfile}", "sleep=2"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        self.wait_for_files([pidfile])
        while len(self.read_pids(pidfile)) < 2:
            pass
        for pid, _ in self.read_pids(pidfile).values():
            with open(f"/proc/{pid}/status") as f:
                ignored = int(next(l for l in f if l.startswith("SigIgn:")).split()[1], 16)
            self.assertTrue(ignored & (1 << (signal.SIGHUP - 1)), "the worker must inherit SIGHUP ignored")
        os.killpg(proc.pid, signal.SIGHUP)  # ddprun's group: as a closing terminal does
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err.decode())
