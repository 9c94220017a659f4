"""Issue 21's live view: ddprun-status, from another terminal, shows every rank of a running job (state, step,
step rate over the last minute, last beat, CPU, memory) on every node, as a table, as JSON, and in a watch mode;
what is not known (no beats) is blank; other users cannot reach it; the socket goes with the job."""
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import CANT_CREATE
from harness import DDPRUN, WORKER
from multinode import MultiNodeCase
from wait import wait_until

STATUS = os.path.join(os.path.dirname(os.path.abspath(DDPRUN)), "ddprun-status")


class LiveViewCase(MultiNodeCase):
    def setUp(self):
        super().setUp()
        self.runtime = self.path("runtime")
        os.mkdir(self.runtime, 0o700)
        self.env.update(XDG_RUNTIME_DIR=self.runtime, DDPRUN_STATUS_PERIOD_MS="300")

    def status(self, *args):
        r = subprocess.run([STATUS, *args], env=self.env, capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def jobs(self, *args):
        return json.loads(self.status("--json", *args))

    def wait_view(self, ready, *args, timeout=20):
        def view():
            jobs = self.jobs(*args)
            return jobs if jobs and ready(jobs) else None
        return wait_until(view, lambda: f"the view to become ready: {self.jobs(*args)}", timeout, interval=0.2)

    def sockets(self):
        d = os.path.join(self.runtime, "ddprun")
        return [f for f in os.listdir(d) if f.endswith(".sock")] if os.path.isdir(d) else []


class LiveView(LiveViewCase):
    def test_a_beating_job_shows_every_rank_with_its_step_rate_and_resources(self):
        proc = self.start("--standalone", "--nproc-per-node", 2, "--hang-timeout", 30, "--run-id", "viewed", WORKER,
                          "beatfor=6:100")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        # Not before the ranks are there: during the rendezvous the list is empty (and all() of it true).
        jobs = self.wait_view(lambda j: (ranks := j[0]["nodes"][0]["ranks"]) and all(r["steps_per_s"] for r in ranks))
        self.assertEqual(len(jobs), 1, jobs)
        node = jobs[0]["nodes"][0]
        self.assertEqual((node["run_id"], node["state"], node["world_size"]), ("viewed", "running", 2), node)
        self.assertEqual(jobs[0]["pid"], proc.pid)
        for r in node["ranks"]:
            self.assertEqual(r["state"], "running", r)
            self.assertGreaterEqual(r["step"], 0)
            self.assertGreater(r["steps_per_s"], 4, r)   # test_worker beats 10 times a second
            self.assertLess(r["steps_per_s"], 16, r)
            self.assertLess(r["beat_age_s"], 2, r)
            self.assertGreater(r["rss_bytes"], 0, r)
            self.assertIsNotNone(r["cpu_percent"], r)
        table = self.status()
        self.assertIn("run viewed  round 0 (max restarts 0)  world 2 on 1 node", table)
        self.assertIn("RANK  NODE  HOST", table)
        self.assertEqual(proc.wait(timeout=30), 0)
        self.assertEqual(self.sockets(), [])  # gone with the job
        self.assertIn("no ddprun job of this user runs on this node", self.status())

    def test_without_beats_the_columns_that_need_them_are_blank(self):
        proc = self.start("--standalone", "--nproc-per-node", 1, WORKER, "sleep=3")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        jobs = self.wait_view(lambda j: j[0]["nodes"][0]["ranks"] and
                              j[0]["nodes"][0]["ranks"][0]["cpu_percent"] is not None)
        r = jobs[0]["nodes"][0]["ranks"][0]
        self.assertEqual(r["state"], "running")
        self.assertIsNone(r["step"])
        self.assertIsNone(r["steps_per_s"])
        self.assertIsNone(r["beat_age_s"])
        self.assertEqual(proc.wait(timeout=30), 0)

    def test_a_two_node_job_is_seen_whole_from_either_node(self):
        procs = [self.node(n, 2, "beatfor=6:100", nproc=2, extra=("--hang-timeout", 30, "--run-id", "twonodes"))
                 for n in range(2)]
        for p in procs:
            self.addCleanup(lambda p=p: p.poll() is None and os.killpg(p.pid, signal.SIGKILL))

        def whole(jobs):
            return len(jobs) == 2 and all(len(j["nodes"]) == 2 and j["complete"] for j in jobs)
        jobs = self.wait_view(whole, "--run-id", "twonodes")
        for job in jobs:
            ranks = sorted(r["rank"] for n in job["nodes"] for r in n["ranks"])
            self.assertEqual(ranks, [0, 1, 2, 3], job)
            self.assertEqual(sorted(n["node_rank"] for n in job["nodes"]), [0, 1])
            self.assertEqual(job["nodes"][0]["age_ms"], 0)  # the node asked answers fresh
        self.assertEqual(self.jobs("--run-id", "another"), [])
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)

    def test_watch_redraws(self):
        proc = self.start("--standalone", "--nproc-per-node", 1, WORKER, "sleep=4")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        self.wait_view(lambda j: True)
        watch = subprocess.Popen([STATUS, "--watch", "--interval", "0.3"], env=self.env, stdout=subprocess.PIPE,
                                 text=True)
        time.sleep(1.2)
        watch.terminate()
        out, _ = watch.communicate(timeout=10)
        self.assertGreaterEqual(out.count("RANK  NODE"), 3, out)
        self.assertEqual(proc.wait(timeout=30), 0)

    def test_a_socket_whose_backlog_is_full_does_not_hold_ddprun_status(self):
        """Issue 33: a job socket nobody accepts on, its queue full (a stopped or wedged process), held ddprun-status
        in connect() for good. Now it is passed by (its process lives: nothing is removed) and the view ends."""
        directory = os.path.join(self.runtime, "ddprun")
        os.mkdir(directory, 0o700)
        path = os.path.join(directory, f"wedged.{os.getpid()}.sock")  # a live pid: this test's own
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(0)
        queued = []
        self.addCleanup(lambda: [s.close() for s in queued + [listener]])
        while True:  # fill the queue: a further connect would wait for an accept that never comes
            s = socket.socket(socket.AF_UNIX)
            s.setblocking(False)
            try:
                s.connect(path)
            except BlockingIOError:
                s.close()
                break
            queued.append(s)
        t0 = time.monotonic()
        self.assertEqual(self.jobs(), [])
        self.assertLess(time.monotonic() - t0, 5)
        self.assertTrue(os.path.exists(path), "a live process's socket was removed")

    def test_a_client_that_says_nothing_does_not_hold_ddprun_at_its_end(self):
        """A ddprun-status (or any program of the same user) connected and silent, or stopped, when the job ends:
        its pending read kept the agent's loop alive and ddprun never exited."""
        proc = self.start("--standalone", "--nproc-per-node", 1, "--run-id", "held", WORKER,
                          f"ready={self.ready}", f"waitfile={self.go}")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        self.wait_ready(1)
        name = wait_until(lambda: self.sockets() or None, "the job's socket", 20)[0]
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(silent.close)
        silent.connect(os.path.join(self.runtime, "ddprun", name))
        # Accepted (the agent answers a request on the same loop): a second client's full round trip says so.
        self.assertEqual(len(self.jobs("--run-id", "held")), 1)
        self.release()
        res = self.wait_all([proc], timeout=20)[0]
        self.assertEqual(res.code, 0, res)

    def test_other_users_cannot_reach_it(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to run a process as another user")
        proc = self.start("--standalone", "--nproc-per-node", 1, WORKER, "sleep=4")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        self.wait_view(lambda j: True)
        directory = os.path.join(self.runtime, "ddprun")
        self.assertEqual(os.stat(directory).st_mode & 0o777, 0o700)
        os.chmod(self.tmp, 0o755)
        os.chmod(self.runtime, 0o755)  # even with the way to it open, the private directory stops a stranger
        sock = os.path.join(directory, self.sockets()[0])
        nobody = pwd.getpwnam("nobody")
        probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n"
                 "    s.sendall(b'view\\n'); print('answer:', s.recv(100))\nexcept OSError as e:\n    print('refused:', e)\n")
        r = subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                            "/usr/bin/python3", "-c", probe, sock], capture_output=True, text=True, timeout=20)
        self.assertIn("refused:", r.stdout, r)
        self.assertIn("Permission denied", r.stdout, r)
        self.assertEqual(proc.wait(timeout=30), 0)


class MetricsTextfile(LiveViewCase):
    def test_two_jobs_without_a_run_id_keep_a_textfile_each(self):
        """Issue 33: two jobs with the default run id on one node wrote one file, and the first to end removed the
        other's series. Each now has its own ("none-<pid>"), and ends only its own."""
        textdir = self.path("textfile")
        os.mkdir(textdir)
        short, long_ = (self.start("--standalone", "--nproc-per-node", 1, "--metrics-textfile", textdir, WORKER,
                                   f"waitfile={self.path(go)}") for go in ("go-short", "go-long"))
        for p in (short, long_):
            self.addCleanup(lambda p=p: p.poll() is None and os.killpg(p.pid, signal.SIGKILL))
        names = {p.pid: f"ddprun_none-{p.pid}_node0.prom" for p in (short, long_)}
        wait_until(lambda: all(os.path.exists(os.path.join(textdir, n)) for n in names.values()),
                   lambda: f"a textfile of each job, not only {os.listdir(textdir)}", 20)
        with open(os.path.join(textdir, names[long_.pid])) as f:
            self.assertIn(f'job="none-{long_.pid}"', f.read())
        open(self.path("go-short"), "w").close()
        self.assertEqual(short.wait(timeout=30), 0)
        self.assertEqual(sorted(os.listdir(textdir)), [names[long_.pid]])  # the other job's series stay
        open(self.path("go-long"), "w").close()
        self.assertEqual(long_.wait(timeout=30), 0)
        self.assertEqual(os.listdir(textdir), [])

    def test_a_node_exporter_textfile_is_written_while_the_job_runs_and_removed_at_its_end(self):
        textdir = self.path("textfile")
        os.mkdir(textdir)
        proc = self.start("--standalone", "--nproc-per-node", 2, "--hang-timeout", 30, "--run-id", "scraped",
                          "--metrics-textfile", textdir, WORKER, "beatfor=4:100")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        path = os.path.join(textdir, "ddprun_scraped_node0.prom")

        def scraped():
            if os.path.exists(path):
                with open(path) as f:
                    text = f.read()
                return text if re.search(r"^ddprun_rank_steps_per_second\{", text, re.M) else None
        text = wait_until(scraped, f"a steps-per-second line in {path}", 20, interval=0.2)
        for rank in (0, 1):
            self.assertIn('ddprun_rank_state{job="scraped",node="0",host=', text)
            self.assertRegex(text, rf'ddprun_rank_step{{job="scraped",node="0",host="[^"]+",rank="{rank}"}} \d+\n')
        self.assertRegex(text, r'ddprun_rank_steps_per_second\{[^}]*rank="0"\} [0-9.e+]+\n')
        self.assertIn('ddprun_job_restarts{job="scraped",node="0"', text)
        self.assertEqual([f for f in os.listdir(textdir) if not f.endswith(".prom")], [])  # no temporary left
        self.assertEqual(proc.wait(timeout=30), 0)
        self.assertEqual(os.listdir(textdir), [])  # the job's series go with it

    def test_after_a_hang_and_a_restart_the_healthy_ranks_are_running_in_the_view_and_the_textfile(self):
        # Issue 32: rank 1 hung in the first attempt; after the restart the view and the textfile kept
        # state="hung" for the new, healthy rank 1 until the job ended (an alert on "hung" fired for it).
        textdir = self.path("textfile")
        os.mkdir(textdir)
        marks = self.path("marks")
        os.mkdir(marks)
        first = os.path.join(marks, "ready.1")  # made by the first attempt's rank 1: later workers skip "?first:"
        proc = self.start("--standalone", "--nproc-per-node", 2, "--hang-timeout", 1, "--max-restarts", 1,
                          "--run-id", "again", "--metrics-textfile", textdir, WORKER,
                          f"?{first}:beat=1", f"@1:?{first}:ready={marks}", f"@1:?{first}:hang",
                          f"@0:?{first}:beatfor=60", "beatfor=8:100", "print=done")
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        # The restart is seen in the view as round 1; then the file that marks the second attempt's workers.
        jobs = self.wait_view(lambda js: js[0]["nodes"][0].get("restart_count") == 1 and all(
            r["state"] == "running" and r["step"] is not None for r in js[0]["nodes"][0]["ranks"]), timeout=40)
        ranks = {r["rank"]: r for r in jobs[0]["nodes"][0]["ranks"]}
        self.assertEqual({r: ranks[r]["state"] for r in ranks}, {0: "running", 1: "running"}, jobs)
        self.assertTrue(all(r["beat_age_s"] >= 0 for r in ranks.values()), jobs)
        path = os.path.join(textdir, "ddprun_again_node0.prom")

        def restarts():
            with open(path) as f:
                return 'restarts{job="again",node="0"' in f.read()
        wait_until(restarts, f"the job's restarts line in {path}", 10, interval=0.2)
        time.sleep(1)  # a few status periods of the new round
        with open(path) as f:
            text = f.read()
        self.assertNotIn('state="hung"', text)
        self.assertRegex(text, r'ddprun_rank_state\{[^}]*rank="1"[^}]*state="running"\} 1')
        self.assertEqual(proc.wait(timeout=40), 0)

    def test_an_unwritable_directory_is_refused_before_anything_starts(self):
        r = self.run_ddprun("--standalone", "--metrics-textfile", self.path("missing"), "--nproc-per-node", 1,
                            WORKER, "print=started")
        self.assertEqual(r.code, CANT_CREATE, r)
        self.assertIn("--metrics-textfile", r.stderr.decode())
        self.assertNotIn("started", r.stdout.decode())
