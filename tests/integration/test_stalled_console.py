"""ddprun's own I/O never stalls supervision: a console that stops draining (a terminal paused with Ctrl-S,
`| less` at its prompt, a stalled ssh), a console gone for good, and a ddprun that is itself paused
(SIGSTOP, Ctrl-Z) - in each phase (running, tearing down, between restarts, waiting for another node), on
one node and two. Each case checks the exit code and root cause, that every process is gone in time while
the console is still stalled, and that no line the workers wrote is lost or cut (or that the loss is said).

The stalled console is a pipe whose read end the test holds without reading; draining it later is the
reader coming back."""
import os
import signal
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import WORKER
from ports import free_port
from stalled_console import PROMPT, ConsoleCase, StalledConsole, line_numbers, without_cut_last_line
from wait import wait_until


class Running(ConsoleCase):
    def test_a_failure_is_torn_down_while_the_console_is_stalled(self):
        """The issue's reproduction: rank 1 fails while rank 0 floods a console nobody reads. Every worker
        is gone within seconds, not when the reader comes back; once it does, nothing is missing."""
        for nnodes in (1, 2):
            with self.subTest(nodes=nnodes):
                self.port = free_port()
                pidfile = self.path(f"pids{nnodes}")
                steps = (f"pidfile={pidfile}", "@0:lines=1500000", "@0:hang", "@1:sleep=1", "@1:exit=3")
                console = StalledConsole()
                if nnodes == 1:
                    proc = self.start_on(console, "--nproc-per-node", 2, "--heartbeat-timeout", 2, WORKER, *steps)
                    others = []
                else:  # the stalled console is on the host; the failing rank on the other node
                    proc = self.start_on(console, "--nnodes", 2, "--node-rank", 0, "--master-addr", "127.0.0.1",
                                         "--rdzv-port", self.port, "--heartbeat-interval", 0.2,
                                         "--heartbeat-timeout", 1, WORKER, *steps)
                    others = [self.node(1, 2, *steps)]
                self.wait_for_files([pidfile])
                wait_until(lambda: len(self.read_pids(pidfile)) >= 2, "both workers' pids", 10)
                pids = self.pids(pidfile)
                failed_at = time.monotonic() + 1
                gone_at = self.wait_gone(pids, timeout=1 + PROMPT)
                self.assertLess(gone_at - failed_at, PROMPT)
                self.assertIsNone(proc.poll(), "ddprun must wait for the console to take what the workers wrote")
                results = self.wait_all(others)
                for r in results:
                    self.assertEqual(r.code, 3, r)
                console.drain()
                self.assertEqual(self.finish(proc), 3, self.stderr_of())
                err = self.stderr_of()
                self.assertIn("root cause: rank 1", err)
                self.assertNotIn("lost the rendezvous server", err)
                self.assert_contiguous(console.text(), 0, at_least=10000, killed=True)

    def test_a_stop_signal_is_answered_while_the_console_is_stalled(self):
        pidfile = self.path("pids")
        console = StalledConsole()
        proc = self.start_on(console, "--nproc-per-node", 2, WORKER, f"pidfile={pidfile}", "lines=1500000", "hang")
        self.wait_for_files([pidfile])
        time.sleep(1)  # the console is congested by now: every pump waits for room
        pids = self.pids(pidfile)
        proc.send_signal(signal.SIGTERM)
        self.wait_gone(pids)
        console.drain()
        self.assertEqual(self.finish(proc), 128 + signal.SIGTERM, self.stderr_of())
        text = console.text()
        for rank in (0, 1):
            self.assert_contiguous(text, rank, killed=True)

    def test_a_healthy_job_outlives_a_console_paused_longer_than_the_heartbeat_timeout(self):
        for nnodes in (1, 2):
            with self.subTest(nodes=nnodes):
                self.port = free_port()
                steps = ("lines=400000",)
                console = StalledConsole()
                if nnodes == 1:
                    proc = self.start_on(console, "--nproc-per-node", 2, "--heartbeat-interval", 0.2,
                                         "--heartbeat-timeout", 1, WORKER, *steps)
                    others = []
                else:  # the paused console is on the node that does not host the rendezvous (whose own
                    # console, the test's pipe, is read only at the end: its worker prints nothing)
                    others = [self.node(0, 2, "sleep=1")]
                    proc = self.start_on(console, "--nnodes", 2, "--node-rank", 1, "--master-addr", "127.0.0.1",
                                         "--rdzv-port", self.port, "--heartbeat-interval", 0.2,
                                         "--heartbeat-timeout", 1, WORKER, *steps)
                time.sleep(4)  # four heartbeat timeouts with the console paused
                self.assertIsNone(proc.poll(), self.stderr_of())
                console.drain()
                self.assertEqual(self.finish(proc), 0, self.stderr_of())
                for r in self.wait_all(others):
                    self.assertEqual(r.code, 0, r)
                text = console.text()
                ranks = (0, 1) if nnodes == 1 else (1,)
                for rank in ranks:
                    self.assertEqual(line_numbers(text, rank), list(range(400000)))

    def test_a_console_gone_for_good_is_said_and_the_job_goes_on(self):
        console = StalledConsole()
        console.close_reader()
        proc = self.start_on(console, "--nproc-per-node", 2, WORKER, "lines=20000")
        self.assertEqual(self.finish(proc), 0, self.stderr_of())
        err = self.stderr_of()
        self.assertRegex(err, r"output lost: ddprun's stdout closed \(Broken pipe\): \d+ lines")


class BeforeTheAgent(ConsoleCase):
    def test_a_console_full_before_ddprun_starts_does_not_hold_its_signals(self):
        """ddprun's very first lines (start-up notes) meet a console that is already full: they wait in ddprun's
        queue, not in a write(2) made while the job signals are held. SIGTERM ends the waiting host at once (143);
        a second one gives up on the console."""
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            while True:
                os.write(w, b"x" * 65536)
        except BlockingIOError:
            pass
        os.set_blocking(w, True)
        import subprocess
        from harness import DDPRUN
        self.env.pop("DDPRUN_TOKEN", None)  # no token: a start-up note says so
        proc = subprocess.Popen([DDPRUN, "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1",
                                 "--rdzv-port", str(self.port), WORKER, "exit=0"],
                                stdout=w, stderr=w, stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        os.close(w)
        time.sleep(0.5)
        for _ in range(2):
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
        try:
            code = proc.wait(timeout=PROMPT)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            os.close(r)
            self.fail("ddprun did not end: a write to the full console held it with its signals blocked")
        os.close(r)
        self.assertEqual(code, 143)


class Restarts(ConsoleCase):
    def test_a_restart_does_not_wait_for_a_stalled_console(self):
        """Round 0: rank 0 floods the stalled console, rank 1 fails. Round 1 starts while the console is still
        stalled (round 0's output waits for the reader beside it), and its rank 1 floods; then the reader comes
        back: exit 0, and each round's lines are all there, in order. The rounds flood from different ranks: their
        lines drain side by side, interleaved line by line (docs/FAILURES.md: "the old round's lines drain beside
        the new one"), which the test once read as one round's gap when a loaded machine (four busy loops) left
        round 0's pump still draining as round 1 wrote."""
        events = self.path("events.jsonl")
        console = StalledConsole()
        proc = self.start_on(console, "--nproc-per-node", 2, "--max-restarts", 1, "--events-file", events, WORKER,
                             f"ready={self.ready}", f"@1:?{self.ready}/ready.1:exit=3",
                             f"@0:?{self.ready}/ready.0:lines=1500000", "@1:lines=1500000", f"waitfile={self.go}")

        def started():
            return sum(e["event"] == "started" for e in self.events(events)) if os.path.exists(events) else 0
        count = wait_until(lambda: (n := started()) >= 4 and n, "round 1 to start while the console was stalled", 20,
                           interval=0.05)
        self.assertEqual(count, 4, "round 1 did not start while the console was stalled")
        console.drain()
        self.release()
        self.assertEqual(self.finish(proc), 0, self.stderr_of())
        text = console.text()
        first = without_cut_last_line(line_numbers(text, 0))  # round 0's rank 0 was killed by the teardown
        self.assertGreater(len(first), 0, "round 0 wrote nothing")
        self.assertEqual(first, list(range(len(first))), "round 0's lines have a gap")
        self.assertEqual(line_numbers(text, 1), list(range(1500000)), "round 1's lines are not all there")


class Paused(ConsoleCase):
    def stop_for(self, proc, stop_signal, seconds):
        """Stops ddprun with `stop_signal` (SIGSTOP, or SIGTSTP: Ctrl-Z), continues it `seconds` later, and
        returns its exit code and stderr."""
        os.kill(proc.pid, stop_signal)
        time.sleep(seconds)
        os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=30)
        return proc.returncode, err

    def test_a_stopped_ddprun_resumes_its_job(self):
        """SIGSTOP (kill -STOP $DDPRUN_AGENT_PID, a debugger, a frozen VM) for 4 heartbeat timeouts, one
        node: the in-process server and client must not take the pause for each other's silence."""
        res_proc = self.start("-v", "--nproc-per-node", 2, "--heartbeat-interval", 0.2, "--heartbeat-timeout", 1,
                              WORKER, f"ready={self.ready}", "sleep=6")
        self.wait_ready(2)
        code, err = self.stop_for(res_proc, signal.SIGSTOP, 4)
        self.assertEqual(code, 0, err.decode())
        self.assertIn(b"did not run for", err)

    def test_ctrl_z_pauses_the_workers_and_fg_resumes_them(self):
        pidfile = self.path("pids")
        proc = self.start("--nproc-per-node", 2, WORKER, f"pidfile={pidfile}", f"ready={self.ready}", "sleep=3")
        self.wait_ready(2)
        pids = self.pids(pidfile)
        os.kill(proc.pid, signal.SIGTSTP)
        wait_until(lambda: all(proc_state(p) == "T" for p in [proc.pid, *pids]),
                   lambda: f"ddprun and its workers stopped: {[proc_state(p) for p in [proc.pid, *pids]]}", PROMPT)
        time.sleep(5)  # longer than the workers' own sleep: stopped, they cannot finish
        self.assertIsNone(proc.poll())
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 0, err.decode())
        self.assertIn(b"received SIGTSTP", err)

    def test_a_ctrl_z_longer_than_the_hang_timeout_is_no_ones_hang(self):
        """The workers beat (--hang-timeout 1) and are stopped with ddprun for 3 s: on fg their last beats are
        old, but the pause was the user's, not a hang; a worker that stays silent after it still is one."""
        proc = self.start("--nproc-per-node", 2, "--hang-timeout", 1, WORKER, f"ready={self.ready}", "beatfor=4:50")
        self.wait_ready(2)
        code, err = self.stop_for(proc, signal.SIGTSTP, 3)
        self.assertEqual(code, 0, err.decode())
        self.assertNotIn(b"hung", err)

    def test_a_hang_after_a_ctrl_z_is_still_found(self):
        proc = self.start("--nproc-per-node", 2, "--hang-timeout", 1, WORKER, f"ready={self.ready}", "beat=1",
                          "@1:hang", "@0:beatfor=6:50")
        self.wait_ready(2)
        code, err = self.stop_for(proc, signal.SIGTSTP, 0.5)
        self.assertNotEqual(code, 0, err.decode())
        self.assertIn(b"root cause: rank 1", err)
        self.assertIn(b"hung", err)

    def test_two_nodes_ride_out_a_pause_shorter_than_the_heartbeat_timeout(self):
        for paused in (0, 1):
            with self.subTest(paused_node=paused):
                self.port = free_port()
                # Before the workers start: a worker that finds no directory cannot say it is ready (the race that
                # failed this test on a loaded machine, where the workers ran before this line).
                os.makedirs(f"{self.ready}{paused}", exist_ok=True)
                procs = [self.start("--nnodes", 2, "--node-rank", r, "--master-addr", "127.0.0.1", "--rdzv-port",
                                    self.port, "--heartbeat-interval", 0.2, "--heartbeat-timeout", 3,
                                    "--nproc-per-node", 1, WORKER, f"ready={self.ready}{paused}", "sleep=4")
                         for r in (0, 1)]
                self.wait_for_files([f"{self.ready}{paused}/ready.{r}" for r in (0, 1)], timeout=20)
                os.kill(procs[paused].pid, signal.SIGSTOP)
                time.sleep(1.5)
                os.kill(procs[paused].pid, signal.SIGCONT)
                for r in self.wait_all(procs):
                    self.assertEqual(r.code, 0, r)


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:].split()[0].decode()
    except OSError:
        return "gone"
