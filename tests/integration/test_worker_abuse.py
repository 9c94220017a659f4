"""Issue 33, "a worker can crash or mislead its own ddprun", and the local environment: a worker that truncates its
heartbeat channel, beats with the wall clock or writes a wall-clock time into its work counter; a run id too long
for a socket name; a full /dev/shm. Each used to end ddprun (SIGBUS, 135; exit 74 "lost the rendezvous server";
"internal error", 70; 73) or blind its hang detection. Every worker is a few lines of stdlib Python writing the slot
as documented (common/contract/worker_contract.hpp)."""
import json
import os
import subprocess
import sys
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import HUNG
from harness import DDPRUN, DdprunTestCase
from wait import wait_until

STATUS = os.path.join(os.path.dirname(os.path.abspath(DDPRUN)), "ddprun-status")
SLOT = ("import mmap, os, struct, time\n"
        "fd = int(os.environ['DDPRUN_HEARTBEAT_FD']); at = int(os.environ['DDPRUN_HEARTBEAT_OFFSET'])\n"
        "page = mmap.mmap(fd, 4096)\n"
        "def beat(step, clock=time.monotonic_ns): struct.pack_into('qq', page, at, step, clock())\n")


class WorkerAbuse(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.runtime = self.path("runtime")
        os.mkdir(self.runtime, 0o700)
        self.env.update(XDG_RUNTIME_DIR=self.runtime, DDPRUN_STATUS_PERIOD_MS="200")

    def python(self, code, *flags, nproc=1, timeout=60):
        return self.run_ddprun("--standalone", "--nproc-per-node", nproc, *flags, sys.executable, "-c", code,
                               timeout=timeout)

    def test_a_worker_cannot_truncate_its_heartbeat_channel(self):
        """Before: the truncation succeeded and the agent's next read of the page was a SIGBUS (exit 135, no
        summary). The memfd is sealed against shrinking: both ways of truncating fail in the worker (EPERM)."""
        code = SLOT + (
            "for how in ('ftruncate', 'reopen'):\n"
            "    try:\n"
            "        os.ftruncate(fd, 0) if how == 'ftruncate' else open(f'/proc/self/fd/{fd}', 'w').close()\n"
            "        print(how, 'truncated', flush=True)\n"
            "    except OSError as e:\n"
            "        print(how, 'refused', e.errno, flush=True)\n"
            "for step in range(10):\n"
            "    beat(step); time.sleep(0.1)\n")  # the status ticks (every 0.2 s) read the page meanwhile
        res = self.python(code)
        self.assertEqual(res.code, 0, res)
        self.assertEqual(res.stdout.decode().splitlines(), ["[rank0]: ftruncate refused 1", "[rank0]: reopen refused 1"])

    def test_beats_from_the_wall_clock_are_ignored_and_said_once(self):
        """Before: a beat with CLOCK_REALTIME (about 1.8e18 ns, far ahead of CLOCK_MONOTONIC) counted as a beat that
        never ages: the rank was never judged hung, the live view showed "LAST BEAT -1795755130.9s". Now it reads
        as no beat, said once; under --hang-timeout with --hang-initial-timeout the silent rank is judged hung."""
        code = SLOT + "for step in range(100):\n    beat(step, time.time_ns); time.sleep(0.1)\n"
        res = self.python(code, "--hang-timeout", 2, "--hang-initial-timeout", 3, "--term-timeout", 1)
        err = res.stderr.decode()
        self.assertEqual(res.code, HUNG, res)  # hung, not alive for ever
        self.assertEqual(err.count("beats with a time from another clock than CLOCK_MONOTONIC"), 1, err)

    def test_a_wall_clock_work_counter_does_not_cost_the_node(self):
        """Before: the agent forwarded the pace computed from it, past the protocol's bound; its own server took
        that for a protocol error and closed the node: exit 74 "lost the rendezvous server" for a healthy job."""
        code = SLOT + ("for step in range(40):\n"
                       "    if step == 10: struct.pack_into('q', page, at + 24, time.time_ns())  # once, mid-run\n"
                       "    beat(step); time.sleep(0.1)\n")
        res = self.python(code, "--straggler-window", 2)
        self.assertEqual(res.code, 0, res)
        self.assertNotIn("lost the rendezvous server", res.stderr.decode())

    def test_a_run_id_too_long_for_a_socket_name_keeps_its_live_view(self):
        """Before: "internal error: File name too long", exit 70, for any valid run id of 90-128 characters (the
        socket's path passed 108 bytes). The socket takes a short name; ddprun-status --run-id still finds it."""
        run_id = "r" * 120
        proc = self.start("--standalone", "--nproc-per-node", 1, "--run-id", run_id, sys.executable, "-c",
                          "import time; time.sleep(30)")
        self.addCleanup(lambda: proc.poll() is None and proc.kill())

        def listed():
            self.assertIsNone(proc.poll(), "ddprun ended before ddprun-status listed its job")
            out = subprocess.run([STATUS, "--json", "--run-id", run_id], env=self.env, capture_output=True,
                                 text=True, timeout=20)
            return json.loads(out.stdout or "[]")
        jobs = wait_until(listed, "ddprun-status to list the job", 20, interval=0.1)
        self.assertEqual(len(jobs), 1, (jobs, proc.poll()))
        self.assertEqual(jobs[0]["nodes"][0]["run_id"], run_id)
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        self.assertNotIn(b"internal error", err)
        self.assertEqual(os.listdir(os.path.join(self.runtime, "ddprun")), [], "the socket was left behind")

    def test_sixteen_workers_with_log_files_fit_in_a_gigabyte_of_address_space(self):
        """Before: --log-dir --tee 3 made a writer thread per log file with glibc's default 8 MiB stack: 16 workers,
        35 threads, 1.2 GiB of address space, and `ulimit -v 1048576` ended the job with "internal error" (70)."""
        if "ASAN_OPTIONS" in os.environ:  # scripts/test --sanitize
            self.skipTest("AddressSanitizer reserves terabytes of address space for its shadow: no ulimit -v run "
                          "can start under it (seen in scripts/test --sanitize)")
        script = (f"ulimit -v 1048576 && exec {DDPRUN} --standalone --nproc-per-node 16 --log-dir {self.path('logs')} "
                  "--tee 3 sh -c 'echo out; echo err >&2'")
        res = subprocess.run(["sh", "-c", script], env=self.env, capture_output=True, timeout=60)
        self.assertEqual(res.returncode, 0, res)
        self.assertEqual(res.stdout.decode().count(": out"), 16, res)

    @unittest.skipUnless(os.geteuid() == 0 and subprocess.run(["unshare", "--mount", "true"]).returncode == 0,
                         "needs root and mount namespaces (unshare --mount) to fill a private /dev/shm")
    def test_a_full_dev_shm_falls_back_to_tmp(self):
        """Before: a full /dev/shm made every job refuse to start (73). In a private mount namespace /dev/shm is a
        tmpfs of 64 KiB and 3 inodes, filled (no byte, no inode left); the run directory goes to /tmp, and ddprun
        says so."""
        script = (f"mount -t tmpfs -o size=64k,nr_inodes=3 tmpfs /dev/shm && touch /dev/shm/a /dev/shm/b; "
                  f"(dd if=/dev/zero of=/dev/shm/a bs=4k 2>/dev/null; true) && "
                  f"exec {DDPRUN} --standalone --nproc-per-node 1 sh -c 'echo ran'")
        env = dict(self.env)
        for var in ("TMPDIR", "XDG_RUNTIME_DIR"):
            env.pop(var, None)
        res = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], env=env,
                             capture_output=True, timeout=60)
        self.assertEqual(res.returncode, 0, res)
        self.assertIn(b"[rank0]: ran", res.stdout)
        self.assertIn(b"the run directory is in /tmp: /dev/shm full", res.stderr)
