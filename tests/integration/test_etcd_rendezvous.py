"""A job that meets in etcd (--rdzv-backend etcd): real etcd from Debian's etcd-server, one member or three on
loopback (tests/support/etcd_cluster.py), and real ddprun agents. No node is special on the command line: the agents
elect the one that hosts the rendezvous (etcd/coordinator_election.hpp), and every promise of ddprun's own
rendezvous holds: ranks by node order, one failure ends every node with the same root cause and code, a job leaves
nothing in etcd, two jobs on one etcd stay apart, etcd's failures are clear errors."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from etcd_cluster import EtcdCluster, b64, skip_unless_etcd
from exit_codes import HUNG, NO_INPUT, RDZV_PROTOCOL, RDZV_REFUSED, UNAVAILABLE, USAGE
from harness import DDPRUN, WORKER, pid_alive
from multinode import MultiNodeCase
from ports import free_port
from wait import wait_until

REFORM_WORKER = os.path.join(os.path.dirname(__file__), "py", "reform_worker.py")


class EtcdCase(MultiNodeCase):
    MEMBERS = 1
    TLS = False

    @classmethod
    def setUpClass(cls):
        skip_unless_etcd()
        cls.etcd_dir = tempfile.mkdtemp(prefix="ddprun_etcd_")
        cls.etcd = EtcdCluster(cls.etcd_dir, cls.MEMBERS, tls=cls.TLS)
        try:
            cls.etcd.start()
        except BaseException:
            cls.etcd.stop()
            shutil.rmtree(cls.etcd_dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.etcd.stop()
        shutil.rmtree(cls.etcd_dir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.run_id = "job-" + self.id().rsplit(".", 1)[-1][:60]
        self.marker_dir = self.ready

    def etcd_node(self, *steps, nproc=2, nnodes=2, run_id=None, endpoints=None, extra=(), program=WORKER):
        return self.start("--nnodes", nnodes, "--nproc-per-node", nproc, "--rdzv-backend", "etcd",
                          "--rdzv-endpoint", endpoints or self.etcd.endpoints, "--rdzv-id", run_id or self.run_id,
                          "--local-addr", "127.0.0.1", "--heartbeat-interval", "0.2", "--heartbeat-timeout", "1",
                          "--rdzv-timeout", "20", *extra, program, *steps)

    def assert_only_the_end_left(self, run_id=None, prefix="/ddprun", complete=None):
        """The job left nothing in etcd but its end (issue 53: recorded for a late node, under a lease of its own),
        which names the job's outcome. Returns the record."""
        job = f"{prefix}/{run_id or self.run_id}/"
        self.assertEqual(self.etcd.keys(job), [job + "end"])
        end = json.loads(self.etcd.value(job + "end"))
        self.assertEqual(end["format"], "ddprun-job-end/1", end)
        self.assertEqual(end["run_id"], run_id or self.run_id, end)
        if complete is not None:
            self.assertEqual(end["complete"], complete, end)
        return end

    def coordinator(self, run_id=None):
        """What the elected agent published: {"host", "port", "node", "pid"}, or None."""
        value = self.etcd.value(f"/ddprun/{run_id or self.run_id}/coordinator")
        return json.loads(value) if value else None


class OneMember(EtcdCase):
    def test_two_nodes_meet_in_etcd_and_leave_no_key(self):
        procs = [self.etcd_node("env=RANK", "env=WORLD_SIZE", "env=MASTER_PORT") for _ in range(2)]
        results = self.wait_all(procs)
        ranks, ports = [], set()
        for res in results:
            self.assertEqual(res.code, 0, res)
            out = res.stdout.decode()
            ranks += [int(line.split("=")[1]) for line in out.splitlines() if "RANK=" in line and "WORLD" not in line]
            ports |= {line.split("=")[1] for line in out.splitlines() if "MASTER_PORT=" in line}
            self.assertEqual(out.count("WORLD_SIZE=4\n"), 2, res)
        self.assertEqual(sorted(ranks), [0, 1, 2, 3])
        self.assertEqual(len(ports), 1, "MASTER_PORT differs between nodes")
        said = "".join(r.stderr.decode() for r in results)
        self.assertEqual(said.count("this node hosts the rendezvous (elected in etcd"), 1, said)
        self.assertEqual(said.count("(elected in etcd)"), 1, said)  # the other node's line
        # The host revoked its lease at the end: the job's keys went with it.
        self.assert_only_the_end_left()

    def test_a_job_without_a_token_says_on_every_node_who_else_can_join_it(self):
        # Issue 55: a token-less etcd job is anyone's who can write its key (both agents got MASTER 6.6.6.6 from a
        # stand-in host that knew only the run id). It still runs, as torchrun's does, but every agent says so.
        del self.env["DDPRUN_TOKEN"]
        results = self.wait_all([self.etcd_node("exit=0") for _ in range(2)])
        for res in results:
            self.assertEqual(res.code, 0, res)
            self.assertIn("anyone who can write etcd's keys under the job's prefix can also stand in for its host",
                          res.stderr.decode(), res)

    def test_a_worker_failure_on_either_node_ends_both(self):
        for failing in (0, 3):
            with self.subTest(failing_rank=failing):
                go = self.path(f"go{failing}")
                ready = self.path(f"ready{failing}")
                os.mkdir(ready)
                steps = [f"ready={ready}", f"@{failing}:waitfile={go}", f"@{failing}:errorfile=boom",
                         f"@{failing}:exit=7", "hang"]
                run_id = f"{self.run_id}-{failing}"
                procs = [self.etcd_node(*steps, run_id=run_id) for _ in range(2)]
                self.wait_for_files([os.path.join(ready, f"ready.{r}") for r in range(4)], timeout=20)
                t0 = time.monotonic()
                with open(go, "w"):
                    pass
                results = self.wait_all(procs)
                self.assertLess(time.monotonic() - t0, 5)
                for res in results:
                    self.assertEqual(res.code, 7, res)
                    err = res.stderr.decode()
                    self.assertIn(f"root cause: rank {failing} (local rank {failing % 2}, node {failing // 2}, host",
                                  err, res)
                    self.assertIn("root cause error: boom", err, res)
                self.assert_only_the_end_left(run_id)

    def test_a_host_gone_before_the_job_formed_is_replaced(self):
        # Two of three nodes are there: the elected one hosts, the other waits in its rendezvous. The host is
        # SIGKILLed: the waiting agent elects another host once the dead one's lease ran out (itself: nobody else is
        # there), and the job forms there with two newcomers. No operator, no node named anywhere.
        first = [self.etcd_node("env=RANK", nnodes=3, nproc=1) for _ in range(2)]
        wait_until(lambda: self.coordinator() is not None, "a host elected", 10)
        host_pid = self.coordinator()["pid"]
        survivor = next(p for p in first if p.pid != host_pid)
        self.stderr_until(survivor, b"(elected in etcd)", 10, why="the other agent joined the host")
        os.kill(host_pid, signal.SIGKILL)
        host = next(p for p in first if p.pid == host_pid)
        host.communicate()
        t0 = time.monotonic()
        seen = self.stderr_until(survivor, b"this node hosts the rendezvous", 20, why="a new host elected")
        self.assertIn(b"gone before the job formed", seen)
        self.assertLess(time.monotonic() - t0, 15)  # the lease (10 s) and a retry
        newcomers = [self.etcd_node("env=RANK", nnodes=3, nproc=1) for _ in range(2)]
        results = self.wait_all([survivor, *newcomers], timeout=30)
        out = "".join(r.stdout.decode() for r in results)
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.assertEqual(sorted(int(line.split("=")[1]) for line in out.splitlines() if "RANK=" in line), [0, 1, 2])
        self.assert_only_the_end_left()

    def test_the_host_lost_while_the_job_runs_is_replaced_and_judged(self):
        # A job of fixed size: the host's node is gone with its workers, so the job must end, but with that node
        # named as the root cause on every node, by a host elected anew (not "lost the rendezvous server").
        procs = [self.etcd_node(f"ready={self.ready}", "hang", nnodes=3, nproc=1) for _ in range(3)]
        self.wait_ready(3)
        # The claim below is that the new host names the lost one from the round it kept in etcd: that write is
        # asynchronous and may come after the workers are up on a loaded machine (the host was once killed
        # before it, and the cause said "host ?").
        wait_until(lambda: self.etcd.value(f"/ddprun/{self.run_id}/round"), "the round kept in etcd", 10)
        host = self.coordinator()
        host_proc = next(p for p in procs if p.pid == host["pid"])
        t0 = time.monotonic()
        os.kill(host_proc.pid, signal.SIGKILL)
        results = self.wait_all(procs, timeout=40)
        survivors = [r for p, r in zip(procs, results) if p is not host_proc]
        causes = set()
        for res in survivors:
            err = res.stderr.decode()
            self.assertEqual(res.code, 1, res)
            self.assertIn("electing another once its lease runs out, the workers keep running", err, res)
            causes |= {line for line in err.splitlines() if line.startswith("ddprun: root cause:")}
        self.assertEqual(len(causes), 1, causes)  # the same root cause on both
        cause = causes.pop()
        self.assertIn("did not come back to the restarted rendezvous server", cause)
        self.assertIn(f"(host {host['node']})", cause)  # named from the round the lost host kept in etcd
        self.assertLess(time.monotonic() - t0, 30)
        # The new host took the round back as its predecessor kept it in etcd (seats checked), and removed it.
        for res in survivors:
            self.assertNotIn("no round kept in etcd", res.stderr.decode(), res)
        self.assert_only_the_end_left()

    def root_causes(self, results):
        return {line for res in results for line in res.stderr.decode().splitlines()
                if line.startswith("ddprun: root cause:")}

    def test_a_node_that_comes_after_the_end_ends_with_the_recorded_outcome(self):
        # Issue 53, invariant 3: nothing in etcd said the job ended, so a node that came after the end won a fresh
        # election and hosted the ended job until --rdzv-timeout (20 s here), then named a cause of its own. Now
        # the host records the end before it removes anything, and a late node ends at once with it.
        for failing in (True, False):
            with self.subTest(failing=failing):
                run_id = f"{self.run_id}-{failing}"
                steps = ["@1:exit=7"] if failing else ["exit=0"]
                results = self.wait_all([self.etcd_node(*steps, nproc=1, run_id=run_id) for _ in range(2)])
                end = self.assert_only_the_end_left(run_id, complete=not failing)
                t0 = time.monotonic()
                late = self.wait_all([self.etcd_node("exit=0", nproc=1, run_id=run_id)], timeout=30)[0]
                self.assertLess(time.monotonic() - t0, 10, late)
                err = late.stderr.decode()
                self.assertIn("etcd records that this job has ended", err, late)
                self.assertNotIn("this node hosts the rendezvous", err, late)
                self.assertEqual(late.code, 7 if failing else 0, late)
                if failing:
                    self.assertEqual(end["root_cause"]["rank"], 1, end)
                    causes = self.root_causes(results + [late])
                    self.assertEqual(len(causes), 1, causes)  # the late node names the others' root cause
                self.assert_only_the_end_left(run_id, complete=not failing)  # and hosts nothing

    def test_a_host_silent_for_a_while_is_not_replaced_once_it_answers_again(self):
        # The host stopped (SIGSTOP) past the heartbeat timeout: the other node reconnects and starts a takeover
        # election, which waits for the host's lease (still kept: 10 s). The host answers again first: the node is
        # back with it and the election is dropped; without that, it would end the job when read_timeout passed.
        procs = [self.etcd_node(f"ready={self.ready}", f"waitfile={self.go}", nproc=1,
                                extra=("--rdzv-conf", "read_timeout=5")) for _ in range(2)]
        self.wait_ready(2)
        host_proc = next(p for p in procs if p.pid == self.coordinator()["pid"])
        other = next(p for p in procs if p is not host_proc)
        os.kill(host_proc.pid, signal.SIGSTOP)
        try:
            seen = self.stderr_until(other, b"electing another once its lease runs out", 10, why="a takeover began")
        finally:
            os.kill(host_proc.pid, signal.SIGCONT)
        self.stderr_until(other, b"back with the rendezvous host: no other is elected", 10, seen=seen,
                          why="the takeover was dropped")
        time.sleep(6)  # past read_timeout: a takeover still waiting would have ended the job by now
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)

    def test_an_elastic_job_goes_on_without_its_lost_host(self):
        # No single point of failure: --nnodes 2:3, the host's node lost while training; the other two elect a new
        # host, which takes the round back and re-forms the job with them; it then ends 0.
        procs = [self.etcd_node(f"ready={self.ready}", f"waitfile={self.go}", "env=WORLD_SIZE", nnodes="2:3",
                                nproc=1) for _ in range(3)]
        self.assert_the_survivors_go_on(procs)

    def assert_the_survivors_go_on(self, procs, after_kill=lambda: None):
        """The host's agent SIGKILLed (`after_kill` then): the other two re-form as round 1 and end 0 in it."""
        self.wait_ready(3)
        host_proc = next(p for p in procs if p.pid == self.coordinator()["pid"])
        os.kill(host_proc.pid, signal.SIGKILL)
        host_proc.communicate()
        after_kill()
        survivors = [p for p in procs if p is not host_proc]
        for p in survivors:  # round 1, the two of them
            self.stderr_until(p, b" of 2 (node ", 40, why="the job re-formed with the two survivors")
        self.release()
        for res in self.wait_all(survivors, timeout=30):
            self.assertEqual(res.code, 0, res)
            self.assertIn("WORLD_SIZE=2", res.stdout.decode(), res)

    def test_the_survivors_failures_after_the_hosts_loss_are_its_victims(self):
        # Issue 53, invariant 5 (3 of 3 with real DDP workers): the host lost in an elastic job, the survivors'
        # gloo ranks fail at once ("Connection closed by peer"), and their failures, reaching the new host while
        # it took the round back, won over the loss: exit 1 naming a victim with --max-restarts 0. Here the
        # survivors' workers exit 1 as soon as the host is gone (test_worker's ?MARK: steps run only in workers
        # started before MARK existed): the job re-forms for the loss, no restart used, and ends 0.
        mark = self.path("host-gone")
        procs = [self.etcd_node(f"ready={self.ready}", f"?{mark}:waitfile={mark}", f"?{mark}:exit=1",
                                f"waitfile={self.go}", "env=WORLD_SIZE", nnodes="2:3", nproc=1,
                                extra=("--max-restarts", "0")) for _ in range(3)]
        self.assert_the_survivors_go_on(procs, after_kill=lambda: open(mark, "w").close())

    def test_the_workers_stay_through_joins_a_loss_and_the_hosts_loss(self):
        # Re-forming in place on etcd: --nnodes 1:3, one worker per node (py/reform_worker.py: it offers, and
        # records every round it runs in). a trains alone; b joins, c joins; a node that does not host the
        # rendezvous is SIGKILLed, then the host's own node, so the last one elects itself and takes the round
        # back. Every re-form keeps the workers of the nodes that stay (same pids), the new host's too, and the
        # last node ends 0 having started one worker.
        self.env["PYTHON_EXEC"] = "/usr/bin/python3"
        out = self.path("rounds")
        os.mkdir(out)
        extra = ("--rdzv-conf", "last_call_timeout=0.2", "--term-timeout", 5)
        nodes = {}

        def start(name):
            nodes[name] = self.etcd_node(out, nnodes="1:3", nproc=1, program=REFORM_WORKER,
                                         extra=(*extra, "--events-file", self.path(f"ev_{name}.jsonl")))

        def rounds():
            found = {}
            for name in os.listdir(out):
                if name.startswith("round.") and not name.endswith(".tmp"):
                    _, rank, count = name.split(".")
                    with open(os.path.join(out, name)) as f:
                        found.setdefault(int(count), {})[int(rank)] = tuple(map(int, f.read().split()))
            return found

        def round_after(after, world):
            """The first round after round `after` that has `world` ranks, once each wrote: (count, {rank: pid})."""
            def formed():
                for count, ranks in sorted(rounds().items()):
                    if count > after and len(ranks) == world and all(v[1] == world for v in ranks.values()):
                        return count, {r: v[0] for r, v in ranks.items()}
                return None
            return wait_until(formed, lambda: f"a round of {world} after round {after}: {rounds()}", 40, interval=0.05)

        def agent_of(worker_pid):
            with open(f"/proc/{worker_pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1])

        start("a")
        count, first = round_after(-1, 1)
        start("b")
        count, second = round_after(count, 2)
        self.assertLessEqual(set(first.values()), set(second.values()), "a's worker was restarted at b's join")
        start("c")
        count, third = round_after(count, 3)
        self.assertLessEqual(set(second.values()), set(third.values()), "a worker was restarted at c's join")
        host = self.coordinator()["pid"]
        by_agent = {agent_of(pid): pid for pid in third.values()}
        victim = next(p for p in nodes.values() if p.pid != host)
        os.kill(victim.pid, signal.SIGKILL)
        victim.communicate()
        count, fourth = round_after(count, 2)
        self.assertEqual(set(fourth.values()), set(third.values()) - {by_agent[victim.pid]},
                         "a worker that stayed was restarted at the loss of a node")
        host_proc = next(p for p in nodes.values() if p.pid == host)
        os.kill(host, signal.SIGKILL)
        host_proc.communicate()
        last = next(p for p in nodes.values() if p not in (victim, host_proc))
        count, fifth = round_after(count, 1)
        self.assertEqual(list(fifth.values()), [by_agent[last.pid]], "the last node's worker was restarted")
        with open(os.path.join(out, "go"), "w"):
            pass
        res = self.wait_all([last])[0]
        self.assertEqual(res.code, 0, res)
        name = next(n for n, p in nodes.items() if p is last)
        with open(self.path(f"ev_{name}.jsonl")) as f:
            kinds = [json.loads(line)["event"] for line in f]
        self.assertEqual(kinds.count("started"), 1, kinds)
        self.assertGreaterEqual(kinds.count("reformed_in_place"), 2, kinds)
        self.assert_only_the_end_left()

    def test_a_failed_attempt_is_restarted_on_every_node(self):
        # --max-restarts through the host elected in etcd: rank 3 fails in the first attempt only (its ready file did
        # not exist when it started), the job restarts on both nodes and ends 0.
        procs = [self.etcd_node(f"ready={self.ready}", f"@3:?{self.ready}/ready.3:exit=1", extra=("--max-restarts", 1))
                 for _ in range(2)]
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)
            self.assertIn("restart 1 of 1", res.stderr.decode(), res)

    def test_a_node_joining_an_elastic_job_is_placed(self):
        # --nnodes 2:3: two nodes start (the last call, 1 s here), a third joins the running job through the same
        # etcd: the job re-forms with three, and everyone ends 0 in that round.
        extra = ("--rdzv-conf", "last_call_timeout=1")
        steps = [f"ready={self.ready}", f"waitfile={self.go}", "env=WORLD_SIZE"]
        first = [self.etcd_node(*steps, nnodes="2:3", nproc=1, extra=extra) for _ in range(2)]
        self.wait_ready(2)
        third = self.etcd_node(*steps, nnodes="2:3", nproc=1, extra=extra)
        for p in (*first, third):  # every node runs the round of three before the workers may end
            self.stderr_until(p, b" of 3 (node ", 30, why="the job re-formed with the third node")
        self.release()
        for res in self.wait_all([*first, third]):
            self.assertEqual(res.code, 0, res)
            self.assertIn("WORLD_SIZE=3", res.stdout.decode(), res)

    def test_two_jobs_on_one_etcd_stay_apart(self):
        jobs = {"a": f"{self.run_id}-a", "b": f"{self.run_id}-b"}
        procs = {name: [self.etcd_node("env=RANK", "env=TORCHELASTIC_RUN_ID", run_id=rid) for _ in range(2)]
                 for name, rid in jobs.items()}
        for name, rid in jobs.items():
            results = self.wait_all(procs[name])
            out = "".join(r.stdout.decode() for r in results)
            for res in results:
                self.assertEqual(res.code, 0, res)
            self.assertEqual(out.count(f"TORCHELASTIC_RUN_ID={rid}\n"), 4, out)
            self.assertEqual(sorted(int(line.split("=")[1]) for line in out.splitlines() if "]: RANK=" in line),
                             [0, 1, 2, 3], out)

    def test_torchruns_etcd_command_line_runs_unchanged(self):
        # torchrun's spelling: underscores, '=' and etcd-v2 (its newer etcd back-end), with an http:// URL.
        procs = [self.start("--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=etcd-v2",
                            f"--rdzv_endpoint=http://{self.etcd.endpoints}", f"--rdzv_id={self.run_id}",
                            "--rdzv_conf=read_timeout=10,key_prefix=/torchelastic/p", "--local_addr=127.0.0.1",
                            WORKER, "env=RANK") for _ in range(2)]
        results = self.wait_all(procs)
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.assert_only_the_end_left(prefix="/torchelastic/p")

    def test_etcd_unreachable_is_one_clear_error(self):
        nowhere = f"127.0.0.1:{free_port()}"
        t0 = time.monotonic()
        res = self.run_ddprun("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "etcd", "--rdzv-endpoint",
                              nowhere, "--rdzv-id", self.run_id, "--rdzv-conf", "read_timeout=2", WORKER,
                              f"ready={self.ready}", timeout=30)
        self.assertEqual(res.code, UNAVAILABLE, res)
        err = res.stderr.decode()
        self.assertIn("etcd did not answer (reading the coordinator's key) for", err, res)
        self.assertIn(nowhere, err, res)
        # Issue 53: the first failure is said at once, once, with how long ddprun goes on trying.
        said = [line for line in err.splitlines() if "WARNING: etcd does not answer" in line]
        self.assertEqual(len(said), 1, err)
        self.assertIn(f"at {nowhere}: {nowhere}: Connection refused; retrying until 2.0 s have passed "
                      "(--rdzv-conf read_timeout)", said[0])
        self.assertLess(err.index(said[0]), err.index("ERROR: etcd did not answer"), err)
        self.assertLess(time.monotonic() - t0, 15, res)
        self.assertEqual(os.listdir(self.ready), [], "a worker was started")

    def test_a_hang_on_one_node_is_judged_by_every_node(self):
        # The elected host runs the rendezvous' own core, hang verdicts included: 78 on both nodes, the silent
        # rank the root cause everywhere, as with the built-in server.
        steps = [f"ready={self.ready}", f"waitfile={self.go}", "@1:beat=0", "@1:hang", "beatfor=120:100", "exit=0"]
        procs = [self.etcd_node(*steps, nproc=1, extra=("--hang-timeout", 2)) for _ in range(2)]
        self.wait_ready(2)
        self.release()
        for res in self.wait_all(procs, timeout=40):
            self.assertEqual(res.code, HUNG, res)
            self.assertIn(b"root cause: rank 1 (local rank 0, node 1", res.stderr, res)
        self.assert_only_the_end_left()

    def test_the_live_view_shows_the_whole_job_from_either_node(self):
        runtime = self.path("runtime")
        os.mkdir(runtime, 0o700)
        self.env.update(XDG_RUNTIME_DIR=runtime, DDPRUN_STATUS_PERIOD_MS="300")
        status = os.path.join(os.path.dirname(os.path.abspath(DDPRUN)), "ddprun-status")
        procs = [self.etcd_node("beatfor=8:100", extra=("--hang-timeout", 30)) for _ in range(2)]
        for p in procs:
            self.addCleanup(lambda p=p: p.poll() is None and os.killpg(p.pid, signal.SIGKILL))

        def whole():
            r = subprocess.run([status, "--json", "--run-id", self.run_id], env=self.env, capture_output=True,
                               text=True, timeout=20)
            jobs = json.loads(r.stdout) if r.returncode == 0 else []
            return jobs if len(jobs) == 2 and all(len(j["nodes"]) == 2 and j["complete"] for j in jobs) else None
        jobs = wait_until(whole, "both nodes' views to show the whole job", 20, interval=0.2)
        for job in jobs:
            self.assertEqual(sorted(r["rank"] for n in job["nodes"] for r in n["ranks"]), [0, 1, 2, 3], job)
            self.assertEqual(sorted(n["node_rank"] for n in job["nodes"]), [0, 1], job)
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)

    def test_a_straggler_is_named_on_every_node(self):
        # The straggler rule runs in the elected host's rendezvous, as in the built-in server's.
        self.env.update(DDPRUN_STATUS_PERIOD_MS="500")
        steps = ["@0:beatfor=10:50", "@1:beatfor=10:50", "@2:beatfor=10:50", "@3:beatfor=10:100"]
        procs = [self.etcd_node(*steps, extra=("--straggler-window", "3")) for _ in range(2)]
        for res in self.wait_all(procs, timeout=40):
            self.assertEqual(res.code, 0, res)
            self.assertIn(b"straggler: rank 3 (node 1", res.stderr, res)
            self.assertNotIn(b"straggler: rank 0", res.stderr, res)

    def test_an_etcd_with_authentication_on_is_refused_at_once(self):
        # etcd's JSON gateway takes no certificate user (etcd 3.4): with `auth enable`, a request without a
        # user's token is refused (HTTP 400, "user name is empty"). That is an answer, not an outage: one line
        # at once, exit 77, not 60 s of "did not answer".
        base = self.path("auth-etcd")
        os.mkdir(base)
        locked = EtcdCluster(base, 1)
        self.addCleanup(locked.stop)
        locked.start()
        locked.call("/v3/auth/role/add", {"name": "root"})
        locked.call("/v3/auth/user/add", {"name": "root", "password": "pw"})
        locked.call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        locked.call("/v3/auth/enable", {})
        res = self.run_ddprun("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "etcd", "--rdzv-endpoint",
                              locked.endpoints, "--rdzv-id", self.run_id, WORKER, f"ready={self.ready}", timeout=30)
        self.assertEqual(res.code, RDZV_REFUSED, res)
        err = res.stderr.decode()
        self.assertIn("etcd refused the request (reading the coordinator's key)", err, res)
        self.assertIn("user name is empty", err, res)
        self.assertIn(locked.endpoints, err, res)
        self.assertLess(res.elapsed, 5, res)
        self.assertEqual(os.listdir(self.ready), [], "a worker was started")

    def test_a_key_prefix_holding_another_programs_data_is_refused(self):
        # Not a ddprun host's address where the job's coordinator key is: another program shares the prefix (or
        # the run id). Joining whatever that names, or overwriting it, would be wrong: one line, exit 76.
        key = b64(f"/ddprun/{self.run_id}/coordinator")
        self.etcd.call("/v3/kv/put", {"key": key, "value": b64("leader=db-3")})
        self.addCleanup(lambda: self.etcd.call("/v3/kv/deleterange", {"key": key}))
        res = self.run_ddprun("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "etcd", "--rdzv-endpoint",
                              self.etcd.endpoints, "--rdzv-id", self.run_id, WORKER, f"ready={self.ready}", timeout=30)
        self.assertEqual(res.code, RDZV_PROTOCOL, res)
        err = res.stderr.decode()
        self.assertIn("holds 'leader=db-3', not a ddprun rendezvous address", err, res)
        self.assertIn("key prefix", err, res)
        self.assertLess(res.elapsed, 5, res)
        self.assertEqual(os.listdir(self.ready), [], "a worker was started")
        self.assertEqual(self.etcd.value(f"/ddprun/{self.run_id}/coordinator"), "leader=db-3")  # left as it was

    def test_hostile_values_in_etcd_are_one_clear_error_never_a_crash(self):
        # Issue 55: whoever can write etcd wrote the coordinator's key. A million-deep value crashed every agent (139,
        # no summary); a "node" of the wrong type ended every agent with "internal error" (70). One line, exit 76.
        key = b64(f"/ddprun/{self.run_id}/coordinator")
        self.addCleanup(lambda: self.etcd.call("/v3/kv/deleterange", {"key": key}))
        for value, said in (("[" * 1_000_000, "not a ddprun rendezvous address"),
                            ('{"host": "10.0.0.1", "port": 29400, "node": 5}', "not a ddprun rendezvous address"),
                            ('{"host": "10.0.0.1", "port": "29400"}', "not a ddprun rendezvous address")):
            self.etcd.call("/v3/kv/put", {"key": key, "value": b64(value)})
            res = self.run_ddprun("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "etcd", "--rdzv-endpoint",
                                  self.etcd.endpoints, "--rdzv-id", self.run_id, WORKER, f"ready={self.ready}",
                                  timeout=30)
            self.assertEqual(res.code, RDZV_PROTOCOL, (value[:60], res))
            err = res.stderr.decode()
            self.assertIn(said, err, res)
            self.assertLess(len(err), 4000, "the value is never printed whole")
            self.assertEqual(os.listdir(self.ready), [], "a worker was started")

    def test_bad_etcd_options_are_refused_before_anything_starts(self):
        base = ["--nnodes", "2", "--rdzv-id", self.run_id, "--rdzv-backend", "etcd"]
        cases = [
            (["--rdzv-endpoint", self.etcd.endpoints, "--rdzv-conf", "is_host=1"], ["elect"]),
            (["--rdzv-endpoint", "127.0.0.1:2379,"], ["an empty item"]),
            (["--rdzv-endpoint", "127.0.0.1:99999"], ["port of 1-65535"]),
            ([], ["needs --rdzv-endpoint"]),
        ]
        for extra, words in cases:
            with self.subTest(extra=extra):
                self.assert_refused([*base, *extra, WORKER, f"ready={self.ready}"], USAGE, words)


class OverTls(EtcdCase):
    """etcd on https, asking every client for a certificate of its CA (--client-cert-auth)."""
    TLS = True

    def tls_conf(self, ca="ca.pem", client=True, timeout=10):
        conf = [f"read_timeout={timeout}", f"cacert={self.etcd.cert(ca)}"]
        if client:
            conf += [f"cert={self.etcd.cert('client.pem')}", f"key={self.etcd.cert('client.key')}"]
        return ("--rdzv-conf", ",".join(conf))

    def test_a_job_meets_over_tls(self):
        procs = [self.etcd_node("env=RANK", extra=self.tls_conf()) for _ in range(2)]
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)
        self.assert_only_the_end_left()

    def test_tls_refusals_are_one_clear_error_each(self):
        other = self.path("other")
        os.mkdir(other)
        from etcd_cluster import make_certificates
        make_certificates(other, ca_name="stranger")
        cases = [
            # etcd's certificate is not signed by the CA given: ddprun refuses etcd
            (("--rdzv-conf", f"read_timeout=2,cacert={other}/stranger.pem,cert={self.etcd.cert('client.pem')},"
                             f"key={self.etcd.cert('client.key')}"), "certificate verify failed"),
            # no client certificate: etcd refuses ddprun
            (self.tls_conf(client=False, timeout=2), "TLS: sslv3 alert bad certificate"),
        ]
        for extra, words in cases:
            with self.subTest(words=words):
                res = self.run_ddprun("--nnodes", 2, "--nproc-per-node", 1, "--rdzv-backend", "etcd",
                                      "--rdzv-endpoint", self.etcd.endpoints, "--rdzv-id", self.run_id, *extra,
                                      WORKER, f"ready={self.ready}", timeout=30)
                self.assertEqual(res.code, UNAVAILABLE, res)
                self.assertIn(words, res.stderr.decode(), res)
                self.assertIn("check --rdzv-conf cacert, cert and key", res.stderr.decode(), res)
                self.assertEqual(res.stderr.decode().count("WARNING: etcd does not answer"), 1, res)
                self.assertIn(self.etcd.endpoints.replace("https://", ""), res.stderr.decode(), res)
                self.assertLess(res.elapsed, 10, res)
        self.assertEqual(os.listdir(self.ready), [], "a worker was started")

    def test_bad_tls_options_are_refused_before_anything_starts(self):
        base = ["--nnodes", "2", "--rdzv-id", self.run_id, "--rdzv-backend", "etcd", "--rdzv-endpoint"]
        plain = self.etcd.endpoints.replace("https://", "")
        cases = [
            ([*base, plain, "--rdzv-conf", f"cacert={self.etcd.cert('ca.pem')}"], USAGE, ["protocol=https"]),
            ([*base, plain, "--rdzv-conf", "protocol=https,cacert=/nonexistent/ca.pem"], NO_INPUT,
             ["cannot read /nonexistent/ca.pem"]),
            ([*base, plain, "--rdzv-conf", f"protocol=https,cert={self.etcd.cert('client.pem')}"], USAGE,
             ["cert and key go together"]),
            ([*base, "http://127.0.0.1:1,https://127.0.0.1:2"], USAGE, ["mixes http:// and https://"]),
            ([*base, plain, "--rdzv-conf", "protocol=gopher"], USAGE, ["expected http or https"]),
            # Issue 55: a certificate with another's key (here the CA's) was "internal error", 70, on every agent.
            ([*base, plain, "--rdzv-conf",
              f"protocol=https,cert={self.etcd.cert('client.pem')},key={self.etcd.cert('ca.key')}"], NO_INPUT,
             ["etcd TLS: cannot use --rdzv-conf key", "the key it was made with"]),
        ]
        for args, code, words in cases:
            with self.subTest(args=args):
                self.assert_refused([*args, WORKER, f"ready={self.ready}"], code, words)


class ThreeMembers(EtcdCase):
    """A 3-member etcd: made afresh for each test, since the tests kill members."""

    @classmethod
    def setUpClass(cls):
        skip_unless_etcd()

    @classmethod
    def tearDownClass(cls):
        pass

    def setUp(self):
        super().setUp()
        self.etcd = EtcdCluster(self.path("etcd"), 3)
        os.mkdir(self.etcd.base_dir)
        self.addCleanup(self.etcd.stop)
        self.etcd.start()

    def test_an_etcd_leader_lost_before_and_during_the_job(self):
        # The leader dies before the job: its URL first in the list, the agents fail over to the others.
        dead = self.etcd.leader()
        self.etcd.kill(dead)
        urls = self.etcd.endpoints.split(",")
        endpoints = ",".join([urls[dead]] + [u for i, u in enumerate(urls) if i != dead])
        procs = [self.etcd_node(f"ready={self.ready}", f"waitfile={self.go}", "env=RANK", endpoints=endpoints)
                 for _ in range(2)]
        self.wait_ready(4)
        self.assertIsNotNone(self.coordinator())
        # And the new leader during training: one member left, no quorum, etcd answers nobody. The job does not
        # need etcd to train or to end: it ends as usual, the host's lease revoke given up after its bound.
        self.etcd.kill(self.etcd.leader())
        time.sleep(1)
        t0 = time.monotonic()
        self.release()
        results = self.wait_all(procs, timeout=20)
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.assertLess(time.monotonic() - t0, 8, results)
        self.assertTrue(all(not pid_alive(p.pid) for p in procs))


    def test_a_frozen_member_first_in_the_list_is_passed_by(self):
        # A member that answers nothing (SIGSTOPped: a machine hung or cut off from its clients), named first:
        # each agent's first request waits its 2 s for it, then the agent asks the next member and keeps to the
        # one that answered. The job meets and ends as usual, and leaves nothing in etcd.
        frozen = self.etcd.leader()
        os.kill(self.etcd.procs[frozen].pid, signal.SIGSTOP)
        self.addCleanup(lambda: self.etcd.procs[frozen].poll() is None and
                        os.kill(self.etcd.procs[frozen].pid, signal.SIGCONT))
        urls = self.etcd.endpoints.split(",")
        endpoints = ",".join([urls[frozen]] + [u for i, u in enumerate(urls) if i != frozen])
        t0 = time.monotonic()
        procs = [self.etcd_node("env=RANK", endpoints=endpoints) for _ in range(2)]
        results = self.wait_all(procs, timeout=40)
        for res in results:
            self.assertEqual(res.code, 0, res)
        # The other two members elect a leader (500 ms here), then each agent pays one 2 s wait for the frozen
        # member, not one per request.
        self.assertLess(time.monotonic() - t0, 20, results)
        os.kill(self.etcd.procs[frozen].pid, signal.SIGCONT)
        wait_until(lambda: self.etcd.healthy(frozen), "the thawed member healthy again", 20, interval=0.2)
        self.assert_only_the_end_left()

class TorchsOwnEtcdLauncherTests(EtcdCase):
    """The command lines of PyTorch's own launcher tests that use etcd (test/distributed/launcher/run_test.py, the
    ElasticLaunchTest cases with --rdzv_backend=etcd), run by ddprun against the real etcd. Their scripts (every rank
    touches a file named after its global rank) are written here: one in bash for --no_python, one in Python."""

    def setUp(self):
        super().setUp()
        self.touched = self.path("touched")
        os.mkdir(self.touched)
        self.sh = self.path("touch_rank.sh")
        with open(self.sh, "w") as f:
            f.write('#!/bin/sh\ntouch "$1/$RANK"\n')
        os.chmod(self.sh, 0o755)
        self.py = self.path("touch_rank.py")
        with open(self.py, "w") as f:
            f.write("import argparse, os\np = argparse.ArgumentParser()\np.add_argument('--touch_file_dir')\n"
                    "p.add_argument('--fail', action='store_true')\na = p.parse_args()\n"
                    "if a.fail:\n    raise RuntimeError('planned failure')\n"
                    "open(os.path.join(a.touch_file_dir, os.environ['RANK']), 'w').close()\n")

    def etcd_args(self, nnodes="1", run=0):
        # One id per run (`run`), as PyTorch's tests make one (a uuid): an ended job's id stays closed (issue 53).
        return [f"--nnodes={nnodes}", "--rdzv_backend=etcd", f"--rdzv_endpoint={self.etcd.endpoints}",
                f"--rdzv_id={self.run_id}-{run}", "--monitor_interval=1", "--start_method=spawn"]

    def assert_touched(self, world_size):
        self.assertEqual(sorted(os.listdir(self.touched)), sorted(str(i) for i in range(world_size)))

    def test_launch_user_script_python(self):
        r = self.run_ddprun(*self.etcd_args(), "--nproc_per_node=4", self.py, f"--touch_file_dir={self.touched}")
        self.assertEqual(r.code, 0, r)
        self.assert_touched(4)

    def test_launch_user_script_bash_and_its_module_refusal(self):
        args = [*self.etcd_args(), "--nproc_per_node=4", "--no_python"]
        refused = self.run_ddprun(*args, "--module", self.sh, self.touched)
        self.assertEqual(refused.code, USAGE, refused)
        r = self.run_ddprun(*args, self.sh, self.touched)
        self.assertEqual(r.code, 0, r)
        self.assert_touched(4)

    def test_launch_user_script_default_nproc(self):
        r = self.run_ddprun(*self.etcd_args(), "--no_python", self.sh, self.touched)
        self.assertEqual(r.code, 0, r)
        self.assert_touched(1)

    def test_launch_with_env_vars(self):
        self.env.update(PET_NNODES="1", PET_NPROC_PER_NODE="4", PET_RDZV_BACKEND="etcd",
                        PET_RDZV_ENDPOINT=self.etcd.endpoints, PET_RDZV_ID=self.run_id, PET_MONITOR_INTERVAL="1",
                        PET_START_METHOD="spawn", PET_NO_PYTHON="1", PET_MODULE="0")
        r = self.run_ddprun(self.sh, self.touched)
        self.assertEqual(r.code, 0, r)
        self.assert_touched(4)

    def test_nproc_launch_configurations(self):
        for nproc, world_size in (("4", 4), ("auto", len(os.sched_getaffinity(0)))):
            with self.subTest(nproc=nproc):
                for name in os.listdir(self.touched):
                    os.unlink(os.path.join(self.touched, name))
                r = self.run_ddprun(*self.etcd_args(run=nproc), f"--nproc_per_node={nproc}", "--no_python", self.sh,
                                    self.touched)
                self.assertEqual(r.code, 0, r)
                self.assert_touched(world_size)
        r = self.run_ddprun(*self.etcd_args(run="bad"), "--nproc_per_node=unknown", "--no_python", self.sh,
                            self.touched)
        self.assertEqual(r.code, USAGE, r)

    def test_launch_elastic_one_node_of_two(self):
        # --nnodes=1:2 with one node: it starts with MIN after the last call (torch's default 30 s; 1 s here).
        r = self.run_ddprun(*self.etcd_args("1:2"), "--rdzv_conf=last_call_timeout=1", "--nproc_per_node=4",
                            self.py, f"--touch_file_dir={self.touched}")
        self.assertEqual(r.code, 0, r)
        self.assert_touched(4)

    def test_launch_elastic_worker_raise_exception(self):
        r = self.run_ddprun(*self.etcd_args("1:2"), "--rdzv_conf=last_call_timeout=1", "--nproc_per_node=4",
                            "--max_restarts=0", self.py, "--fail")
        self.assertEqual(r.code, 1, r)
        self.assertIn("planned failure", r.stderr.decode(), r)

    def test_launch_elastic_multiple_agents(self):
        procs = [self.start(*self.etcd_args("1:2"), "--nproc_per_node=4", self.py, f"--touch_file_dir={self.touched}")
                 for _ in range(2)]
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)
        self.assert_touched(8)
