"""The supervisor's own resources, stalled in every phase of a job: one test per cell of
{console stalled, console gone, ddprun paused 8 s, log disk full, descriptor limit reached}
x {before the rendezvous, running, tearing down, between restarts} x {one node, two nodes} (one node has no
"before the rendezvous": its rendezvous is in-process and takes a millisecond). On two nodes the stalled resource
is the host's, which also runs the rendezvous server, and the failing rank is on the other node.

Every cell drives the same job shape through a failure (rank 1, or rank 2 on the second node, exits 3) or a
restart, and checks: the exit code and the root cause; every worker gone within PROMPT of the failure while the
resource is still stalled (after the resume for a paused ddprun); nothing left behind (tearDown); and that every
line rank 0 wrote reached the console in order - or, where it cannot (console gone, disk full), that the loss is
said. Cells that start workers under a descriptor limit end with 71 and the limit named.

Start-time refusals (an events FIFO, a planted symlink) do not depend on the phase: test_supervisor_io.py. A
two-node job whose node stalls while running: test_stalled_console.py."""
import os
import resource
import signal
import subprocess
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import OS_ERROR, RDZV_TIMEOUT
from harness import DDPRUN, WORKER, pid_alive
from stalled_console import PROMPT, ConsoleCase, StalledConsole, line_numbers, without_cut_last_line
from wait import wait_until

PAUSE = 8.0
LINES = 300000  # ~7 MB: more than the pipe and ddprun's console queue hold, so rank 0 is back-pressured
RESOURCES = ("console_stalled", "console_gone", "paused", "disk_full", "fd_limit")
PHASES = ("before_rendezvous", "running", "tearing_down", "between_restarts")


class Matrix(ConsoleCase):
    def setUp(self):
        super().setUp()
        self.disk = None

    def tearDown(self):
        if self.disk:
            subprocess.run(["umount", "-l", self.disk], capture_output=True)
        super().tearDown()

    # --- the resources -------------------------------------------------------------------------------
    def small_disk(self):
        self.disk = self.path("disk")
        os.mkdir(self.disk)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", self.disk], capture_output=True)
        if res.returncode != 0:
            self.disk = None
            raise unittest.SkipTest(f"cannot mount a small tmpfs here (needs root): {res.stderr.decode().strip()}")
        return ("--log-dir", self.disk, "--tee", 3)

    def stall(self, resource_name, proc):
        if resource_name == "console_gone":
            self.console.close_reader()
        elif resource_name == "paused":
            os.kill(proc.pid, signal.SIGSTOP)
        elif resource_name == "disk_full":
            try:  # the workers' logs may have filled it already: then even the filler cannot be made
                with open(os.path.join(self.disk, "filler"), "wb") as f:
                    while True:
                        f.write(b"x" * 65536)
            except OSError:
                pass
        elif resource_name == "fd_limit":
            # No descriptor left: every open ddprun tries from now on fails with EMFILE.
            used = len(os.listdir(f"/proc/{proc.pid}/fd"))
            resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (used, used))

    def release(self, resource_name, proc):
        if resource_name == "console_stalled":
            self.console.drain()
        elif resource_name == "paused":
            time.sleep(PAUSE)
            os.kill(proc.pid, signal.SIGCONT)
        elif resource_name == "disk_full" and os.path.exists(os.path.join(self.disk, "filler")):
            os.remove(os.path.join(self.disk, "filler"))

    # --- the job -------------------------------------------------------------------------------------
    def wait_stderr(self, text, timeout=20):
        wait_until(lambda: text in self.stderr_of(),
                   lambda: f"ddprun to say {text!r}; its stderr:\n{self.stderr_of()[-3000:]}", timeout)

    def wait_gone(self, pids, timeout=PROMPT):
        # (no reaping here: a ddprun that ended is the test's child, whose code Popen reads)
        wait_until(lambda: not any(pid_alive(p) for p in pids),
                   lambda: f"the workers to be gone after the failure: {[p for p in pids if pid_alive(p)]} still "
                           f"alive\n{self.stderr_of()[-3000:]}", timeout)

    def run_cell(self, resource_name, phase, nodes):
        if resource_name == "fd_limit" and "ASAN_OPTIONS" in os.environ:  # scripts/test --sanitize
            self.skipTest("UBSan's vptr check probes memory through a pipe of its own: with every descriptor used "
                          "up it reports a false 'invalid vptr' (as test_supervisor_io's fd-limit test)")
        self.console = StalledConsole()
        if resource_name not in ("console_stalled", "console_gone"):
            self.console.drain()  # a reader from the start (console_gone: none, and the pipe closes at the stall)
        pidfile, flag = self.path("pids"), self.path("attempt0-done")
        extra = self.small_disk() if resource_name == "disk_full" else ()
        first = f"?{flag}:"  # steps only the first attempt's workers run
        steps = [f"pidfile={pidfile}", f"ready={self.ready}", f"@0:{first}lines={LINES}", f"@0:{first}hang"]
        # On two nodes the stalled resource is the host's (node 0: the rendezvous server's too) and the
        # failing rank is on node 1.
        failing = 2 if nodes == 2 else 1
        steps += [f"@{failing}:{first}waitfile={self.go}", f"@{failing}:{first}exit=3"]
        steps += [f"@{r}:{first}hang" for r in range(1, 2 * nodes) if r != failing]
        both = ()  # options both nodes get
        if phase == "tearing_down":
            steps.insert(2, "@0:termexit=2")  # rank 0 takes 2 s to go after SIGTERM: the teardown lasts
            extra += ("--term-timeout", 30)
        if phase == "between_restarts":
            both += ("--max-restarts", 1)
            steps.append("print=second attempt")
        if nodes == 2:
            # fd_limit before the rendezvous: the timeout is that cell's expected end
            wait = 6 if (resource_name, phase) == ("fd_limit", "before_rendezvous") else 30
            both += ("--nnodes", 2, "--master-addr", "127.0.0.1", "--rdzv-port", self.port, "--rdzv-timeout", wait)
        host = self.start_on(self.console, *both, *(("--node-rank", 0) if nodes == 2 else ()), "--nproc-per-node", 2,
                             *extra, WORKER, *steps)
        procs = [host]
        if nodes == 2:
            if phase == "before_rendezvous":
                self.wait_stderr("listening on")  # and the other node is not there yet
                self.stall(resource_name, host)
            procs.append(subprocess.Popen([DDPRUN, *map(str, both), "--node-rank", "1", "--nproc-per-node", "2",
                                           WORKER, *steps],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                          env=self.env, start_new_session=True))
        if resource_name == "fd_limit" and phase in ("before_rendezvous", "between_restarts"):
            return self.cell_without_descriptors(resource_name, phase, procs, flag)
        if resource_name == "paused" and phase == "before_rendezvous":
            self.release(resource_name, host)  # the other node waited for the paused one: now the job runs
        self.wait_ready(2 * nodes)
        pids = [pid for pid, _ in self.read_pids(pidfile).values()]
        if phase == "running" or (phase == "between_restarts" and resource_name != "paused"):
            self.stall(resource_name, host)
        if phase == "between_restarts":
            open(flag, "w").close()
        self.release_go()
        if phase == "tearing_down":
            self.wait_stderr("tearing down")
            self.stall(resource_name, host)
        if phase == "between_restarts":
            self.check_restart(resource_name, host, pids, procs)
            return
        if resource_name == "paused" and phase != "before_rendezvous":
            self.release(resource_name, host)
        self.wait_gone(pids, PROMPT + (3 if phase == "tearing_down" else 0))
        if resource_name != "paused":
            self.release(resource_name, host)
        codes = [self.finish(p) for p in procs]
        self.check_end(resource_name, codes, 3, f"root cause: rank {failing}", procs)

    def finish(self, proc, timeout=60):
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            self.fail(f"ddprun pid {proc.pid} did not end within {timeout} s:\n{self.stderr_of()[-3000:]}")

    def release_go(self):
        with open(self.go, "w"):
            pass

    def check_restart(self, resource_name, host, pids, procs):
        if resource_name == "paused":  # paused the moment the restart begins
            self.wait_stderr("restarting the job")
            self.stall(resource_name, host)
            self.release(resource_name, host)
        self.wait_stderr("attempt 1")
        self.wait_gone(pids)  # the first attempt's workers, while the resource is still stalled
        if resource_name != "paused":
            self.release(resource_name, host)
        codes = [self.finish(p) for p in procs]
        self.check_end(resource_name, codes, 0, None, procs)
        if resource_name in ("console_stalled", "paused"):
            self.assertEqual(self.console.text().count("second attempt"), 2)  # the host's two ranks

    def cell_without_descriptors(self, resource_name, phase, procs, flag):
        if phase == "before_rendezvous":
            # The waiting host cannot even accept the other node's connection: said (once), and the wait is
            # bounded by --rdzv-timeout (75) on both nodes - no spinning, no hang.
            codes = [self.finish(p) for p in procs]
            err = self.stderr_of()
            procs[1].stderr.close()
            self.assertEqual(codes, [RDZV_TIMEOUT, RDZV_TIMEOUT], err[-3000:])
            self.assertIn("cannot accept a node's connection: Too many open files (ulimit -n", err)
            self.assertLess(err.count("cannot accept"), 3, "said once, then every 10 s")
            return
        else:
            # Every worker of every node: one started after the flag below would skip its "?flag:" steps as a
            # second attempt's would (rank 2 exits 0 instead of 3), and node 0's ranks would hang for good.
            self.wait_ready(2 * len(procs))
            self.stall(resource_name, procs[0])
            open(flag, "w").close()
            self.release_go()
        codes = [self.finish(p) for p in procs]
        err = self.stderr_of()
        self.assertEqual(codes[0], OS_ERROR, err[-3000:])
        self.assertIn("ulimit -n", err)
        if len(procs) == 2:
            self.assertEqual(codes[1], OS_ERROR, procs[1].stderr.read().decode()[-3000:])  # the root cause is everyone's
            procs[1].stderr.close()

    def check_end(self, resource_name, codes, expected, root_cause, procs):
        err = self.stderr_of()
        others = ""
        for p in procs[1:]:
            others += p.stderr.read().decode(errors="replace")[-3000:]
            p.stderr.close()
        self.assertEqual(codes, [expected] * len(codes), f"{err[-3000:]}\n--- the other node\n{others}")
        if root_cause:
            self.assertIn(root_cause, err)
        if resource_name == "console_gone":
            self.assertRegex(err, r"output lost: ddprun's stdout closed \(Broken pipe\)")
        elif resource_name == "disk_full":
            self.assertIn("No space left on device", err)
            self.assertIn("output lost: rank", err)
        elif expected != 0:
            numbers = without_cut_last_line(line_numbers(self.console.text(), 0))
            self.assertGreater(len(numbers), 0)
            self.assertEqual(numbers, list(range(len(numbers))), "rank 0's lines have a gap or are out of order")


def make_cell(resource_name, phase, nodes):
    def test(self):
        self.run_cell(resource_name, phase, nodes)
    test.__doc__ = f"{resource_name} x {phase} x {nodes} node{'s' if nodes > 1 else ''}"
    return test


for _resource in RESOURCES:
    for _phase in PHASES:
        for _nodes in ((2,) if _phase == "before_rendezvous" else (1, 2)):  # one node has no "before"
            setattr(Matrix, f"test_{_resource}_{_phase}_{_nodes}node", make_cell(_resource, _phase, _nodes))
