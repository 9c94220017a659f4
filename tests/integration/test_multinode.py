"""Multi-node jobs on one machine: 2-4 ddprun agents as separate processes on loopback, one per node rank,
all with --master-addr 127.0.0.1. One failure anywhere ends every node with the same root cause and code."""
import os
import signal
import socket
import subprocess
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import NOT_FOUND, UNAVAILABLE
from harness import DDPRUN, RENDEZVOUS, WORKER
from multinode import LOST, REFUSED, TIMEOUT, MultiNodeCase

class StaticJobs(MultiNodeCase):
    def test_success_with_heterogeneous_nproc(self):
        nprocs = [1, 3, 2]
        procs = [self.node(r, 3, "env=RANK", "env=WORLD_SIZE", "env=GROUP_RANK", "env=LOCAL_RANK",
                           "env=MASTER_PORT", nproc=n) for r, n in enumerate(nprocs)]
        results = self.wait_all(procs)
        offset = 0
        ports = set()
        for r, (n, res) in enumerate(zip(nprocs, results)):
            self.assertEqual(res.code, 0, res)
            out = res.stdout.decode()
            for lr in range(n):
                self.assertIn(f"[rank{offset + lr}]: RANK={offset + lr}\n", out, res)
                self.assertIn(f"[rank{offset + lr}]: LOCAL_RANK={lr}\n", out, res)
            self.assertEqual(out.count("WORLD_SIZE=6\n"), n, res)
            self.assertEqual(out.count(f"GROUP_RANK={r}\n"), n, res)
            ports |= {line.split("=")[1] for line in out.splitlines() if "MASTER_PORT=" in line}
            self.assertIn("global ranks", res.stderr.decode())  # the rendezvous summary block
            offset += n
        self.assertEqual(len(ports), 1, "MASTER_PORT differs between nodes")

    def test_worker_failure_on_a_non_host_node_stops_every_node(self):
        # Everyone else sleeps outside any collective: torchrun's survivors hang here.
        steps = [f"ready={self.ready}", f"@3:waitfile={self.go}", "@3:errorfile=boom", "@3:exit=7", "hang"]
        procs = [self.node(r, 3, *steps, nproc=2) for r in range(3)]
        self.wait_ready(6)
        t0 = time.monotonic()
        self.release()
        results = self.wait_all(procs)
        self.assertLess(time.monotonic() - t0, 5)
        for res in results:
            self.assertEqual(res.code, 7, res)
            err = res.stderr.decode()
            self.assertIn("root cause: rank 3 (local rank 1, node 1, host", err, res)
            self.assertIn("root cause error: boom", err, res)

    def test_worker_killed_by_signal_gives_128_plus_n_everywhere(self):
        steps = [f"ready={self.ready}", f"@0:waitfile={self.go}", "@0:kill=SIGSEGV", "hang"]
        procs = [self.node(r, 2, *steps) for r in range(2)]
        self.wait_ready(2)
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 128 + signal.SIGSEGV, res)

    def test_sigkill_of_one_agent_stops_the_others(self):
        procs = [self.node(r, 3, f"ready={self.ready}", "hang") for r in range(3)]
        self.wait_ready(3)
        os.kill(procs[2].pid, signal.SIGKILL)
        results = self.wait_all(procs)
        self.assertEqual(results[2].code, -signal.SIGKILL)
        for res in results[:2]:
            self.assertEqual(res.code, 1, res)
            self.assertIn("root cause: node 2 (host", res.stderr.decode(), res)

    def test_the_server_node_killed(self):
        procs = [self.node(r, 3, f"ready={self.ready}", "hang") for r in range(3)]
        self.wait_ready(3)
        os.kill(procs[0].pid, signal.SIGKILL)
        results = self.wait_all(procs)
        for res in results[1:]:
            self.assertEqual(res.code, LOST, res)
            self.assertIn("lost the rendezvous server", res.stderr.decode(), res)

    def test_sigterm_to_one_agent_stops_the_job(self):
        procs = [self.node(r, 2, f"ready={self.ready}", "hang") for r in range(2)]
        self.wait_ready(2)
        os.kill(procs[1].pid, signal.SIGTERM)
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 128 + signal.SIGTERM, res)

    def test_wrong_token_run_id_and_duplicate_rank_are_refused_job_undisturbed(self):
        """A duplicate rank is refused (77). An agent with another token or run id cannot tell the job's server
        from an impostor (issue 33: it trusts only a server that proves both): it says so at once, sends nothing,
        and ends at its --rdzv-timeout (75) with that reason."""
        steps = [f"ready={self.ready}", f"waitfile={self.go}"]
        procs = [self.node(r, 2, *steps) for r in range(2)]
        self.wait_ready(2)
        intruders = [self.node(1, 2, "exit=3", extra=("--rdzv-token", "wrong"), rdzv_timeout=2),
                     self.node(1, 2, "exit=3", extra=("--run-id", "other"), rdzv_timeout=2),
                     self.node(1, 2, "exit=3")]
        bad = self.wait_all(intruders)
        unproven = "did not prove it knows this job's token and run id"
        for res, code, words in zip(bad, [TIMEOUT, TIMEOUT, REFUSED], [unproven, unproven, "refused this node"]):
            self.assertEqual(res.code, code, res)
            self.assertIn(words, res.stderr.decode(), res)
            self.assertNotIn("[rank", res.stdout.decode(), res)
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)

    def test_a_program_missing_on_one_node_ends_every_node_at_once(self):
        """Issue 34: a node whose program is not found exited 127 at once, and the others waited --rdzv-timeout
        for it (900 s by default; 20 s here). It tells them first: every node ends within seconds, no worker
        started anywhere, the others with 69 and its reason."""
        t0 = time.monotonic()
        host = self.node(0, 2, f"ready={self.ready}", "exit=0")
        missing = self.start("--nnodes", 2, "--node-rank", 1, "--master-addr", "127.0.0.1", "--rdzv-port", self.port,
                             "--nproc-per-node", 1, "--rdzv-timeout", 20, "no-such-program-here")
        res_host, res_missing = self.wait_all([host, missing])
        self.assertLess(time.monotonic() - t0, 10, (res_host, res_missing))
        self.assertEqual(res_missing.code, NOT_FOUND, res_missing)
        self.assertIn("program 'no-such-program-here' not found in PATH", res_missing.stderr.decode())
        self.assertEqual(res_host.code, UNAVAILABLE, res_host)
        self.assertRegex(res_host.stderr.decode(), r"root cause: node 1 \(host [^)]+\) could not start: program "
                                                   r"'no-such-program-here' not found in PATH")
        self.assertEqual(os.listdir(self.ready), [])  # no worker started anywhere

    def test_duplicate_or_out_of_range_node_rank_while_joining(self):
        steps = [f"ready={self.ready}", "exit=0"]
        first = [self.node(r, 3, *steps) for r in range(2)]
        time.sleep(1.0)  # both joined (a few ms, even on a busy machine); node 2 not yet
        dup = self.wait_all([self.node(1, 3, "exit=3")])[0]
        self.assertEqual(dup.code, REFUSED, dup)
        self.assertIn("duplicate node rank 1: already taken by host", dup.stderr.decode(), dup)
        beyond = self.wait_all([self.node(3, 4, "exit=3")])[0]  # disagrees on --nnodes
        self.assertEqual(beyond.code, REFUSED, beyond)
        self.assertIn("node rank 3 is out of range", beyond.stderr.decode(), beyond)
        for res in self.wait_all(first + [self.node(2, 3, *steps)]):
            self.assertEqual(res.code, 0, res)

    def test_garbage_bytes_to_the_port_leave_the_job_alone(self):
        procs = [self.node(r, 2, f"ready={self.ready}", f"waitfile={self.go}") for r in range(2)]
        self.wait_ready(2)
        for payload in [b"GET / HTTP/1.0\r\n\r\n", os.urandom(4096), b"\xff\xff\xff\xff" + b"x" * 100]:
            with socket.create_connection(("127.0.0.1", self.port)) as s:
                try:
                    s.sendall(payload)
                    s.settimeout(2)
                    while s.recv(4096):
                        pass
                except OSError:
                    pass
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)

    def test_stdin_rank_beyond_the_world_is_said_once_the_world_is_known(self):
        # Before the rendezvous no node knows the world size: the check waits for the assignment.
        procs = [self.node(r, 2, "exit=0", extra=("--stdin-rank", 7)) for r in range(2)]
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)
            self.assertIn("--stdin-rank 7: this round's ranks are 0-1, so no worker reads ddprun's stdin",
                          res.stderr.decode(), res)

    def test_a_node_that_never_joins(self):
        procs = [self.node(r, 3, "exit=0", rdzv_timeout=1) for r in range(2)]
        for res in self.wait_all(procs):
            self.assertEqual(res.code, TIMEOUT, res)
            self.assertIn("missing node ranks 2", res.stderr.decode(), res)
            self.assertNotIn("[rank", res.stdout.decode(), res)

    def test_a_silent_agent_is_lost_after_the_heartbeat_timeout(self):
        procs = [self.node(r, 3, f"ready={self.ready}", "hang") for r in range(3)]
        self.wait_ready(3)
        os.kill(procs[2].pid, signal.SIGSTOP)  # alive but silent: no heartbeats, the connection stays open
        t0 = time.monotonic()
        results = self.wait_all(procs[:2])
        self.assertLess(time.monotonic() - t0, 4)  # heartbeat timeout 1 s
        for res in results:
            self.assertEqual(res.code, 1, res)
            self.assertIn("root cause: node 2 (host", res.stderr.decode(), res)
        # Resumed, it reads the stop the server left for it before closing (even when node 0 has exited since):
        # the same root cause as everywhere, itself, not a lost server.
        os.kill(procs[2].pid, signal.SIGCONT)
        res = self.wait_all(procs[2:])[0]
        self.assertEqual(res.code, 1, res)
        self.assertIn("root cause: node 2 (host", res.stderr.decode(), res)
        self.assertIn("this node was dropped (missed heartbeats for 1.0 s)", res.stderr.decode(), res)

    def test_rendezvous_port_in_use_on_node_0(self):
        with socket.socket() as s:
            s.bind(("0.0.0.0", self.port))
            s.listen()
            res = self.wait_all([self.node(0, 2, f"ready={self.ready}")])[0]
        self.assertEqual(res.code, UNAVAILABLE, res)
        self.assertIn(str(self.port), res.stderr.decode(), res)
        self.assertEqual(os.listdir(self.ready), [], "a worker was started")

    def test_token_file_on_every_node(self):
        token = self.path("token")
        with open(token, "w") as f:
            f.write("  from-a-file \n")
        os.chmod(token, 0o644)  # open to every user: each node warns (issue 33), and the job runs
        del self.env["DDPRUN_TOKEN"]
        procs = [self.node(r, 2, "exit=0", extra=("--rdzv-token-file", token)) for r in range(2)]
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)
            self.assertIn(f"WARNING: token file {token} is open to every user of this machine (mode 0644)",
                          res.stderr.decode(), res)
        os.chmod(token, 0o600)
        self.env["DDPRUN_TOKEN"] = "from-a-file"  # the same token, another way in
        procs = [self.node(0, 2, "exit=0", extra=("--rdzv-token-file", token)), self.node(1, 2, "exit=0")]
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 0, res)
            self.assertNotIn("token file", res.stderr.decode(), res)  # 0600: nothing to say

    def test_server_never_there(self):
        res = self.wait_all([self.node(1, 2, "exit=0", rdzv_timeout=1)])[0]
        self.assertEqual(res.code, TIMEOUT, res)
        self.assertIn("could not reach the rendezvous server", res.stderr.decode(), res)


class Slurm(MultiNodeCase):
    def test_srun_style_no_addresses_typed(self):
        procs = []
        for node in range(2):
            self.env.update(SLURM_NNODES="2", SLURM_NODEID=str(node), SLURM_JOB_NODELIST="127.0.0.1,127.0.0.1",
                            SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_STEP_NODELIST="127.0.0.1,127.0.0.1")
            procs.append(self.start("--nproc-per-node", 2, "--rdzv-port", self.port, WORKER, "env=RANK",
                                    "env=TORCHELASTIC_RUN_ID"))
        for node, res in enumerate(self.wait_all(procs)):
            self.assertEqual(res.code, 0, res)
            out = res.stdout.decode()
            self.assertIn(f"RANK={2 * node + 1}\n", out, res)
            self.assertIn("TORCHELASTIC_RUN_ID=slurm-4242.0\n", out, res)  # job 4242, step 0


class Restarts(MultiNodeCase):
    SCRIPT = ('echo R=$RANK C=$TORCHELASTIC_RESTART_COUNT M=$TORCHELASTIC_MAX_RESTARTS; '
              'if [ $RANK = 2 ] && [ $TORCHELASTIC_RESTART_COUNT -lt 2 ]; then exit 3; fi; sleep 0.1')

    def nodes(self, max_restarts):
        return [self.start("--nnodes", 2, "--node-rank", r, "--master-addr", "127.0.0.1", "--rdzv-port", self.port,
                           "--nproc-per-node", 2, "--max-restarts", max_restarts, "sh", "-c", self.SCRIPT)
                for r in range(2)]

    def test_whole_job_restarts_with_the_same_count_on_every_node(self):
        results = self.wait_all(self.nodes(2))
        for node, res in enumerate(results):
            self.assertEqual(res.code, 0, res)
            out = res.stdout.decode()
            for rank in (2 * node, 2 * node + 1):  # the last attempt ran everywhere, to the end
                self.assertIn(f"[rank{rank}]: R={rank} C=2 M=2\n", out, res)
            if node == 1:  # earlier attempts: the failing rank got as far as its echo (the others may not)
                for count in range(2):
                    self.assertIn(f"[rank2]: R=2 C={count} M=2\n", out, res)

    def test_restarts_exhausted_fail_with_the_root_cause(self):
        results = self.wait_all(self.nodes(1))
        for res in results:
            self.assertEqual(res.code, 3, res)
            self.assertIn("root cause: rank 2 (local rank 0, node 1", res.stderr.decode(), res)
            self.assertNotIn("C=2", res.stdout.decode(), res)

    def test_single_node_restart(self):
        res = self.run_ddprun("--nproc-per-node", 3, "--max-restarts", 3, "sh", "-c", self.SCRIPT)
        self.assertEqual(res.code, 0, res)
        self.assertEqual(res.stdout.decode().count("R=2 C="), 3, res)  # the failing rank always echoes
        self.assertIn("R=0 C=2", res.stdout.decode(), res)


class DynamicJobs(MultiNodeCase):
    def dyn(self, *steps, nproc=1, extra=()):
        return self.start("--nnodes", 3, "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "dynjob",
                          "--nproc-per-node", nproc, "--heartbeat-interval", "0.2", "--heartbeat-timeout", "1",
                          "--rdzv-timeout", "20", *extra, WORKER, *steps)

    def check_ranks(self, results, world):
        seen = []
        for res in results:
            self.assertEqual(res.code, 0, res)
            seen += [int(line.split("=")[1]) for line in res.stdout.decode().splitlines() if "RANK=" in line
                     and "LOCAL" not in line and "GROUP" not in line]
        self.assertEqual(sorted(seen), list(range(world)))

    def test_one_node_dynamic_job_never_listens_beyond_its_endpoint(self):
        # The machine's own name (127.0.1.1 on Debian) widens a multi-node server to every interface; a
        # one-node job has nobody to hear from and binds the endpoint itself.
        endpoint = f"{socket.gethostname()}:{self.port}"
        res = self.wait_all([self.start("-v", "--nnodes", 1, "--rdzv-endpoint", endpoint, "--rdzv-id", "one",
                                        WORKER, "exit=0")])[0]
        self.assertEqual(res.code, 0, res)
        err = res.stderr.decode()
        self.assertIn("listening on", err, res)
        self.assertNotIn("listening on 0.0.0.0", err, res)

    def test_in_process_host_and_assigned_ranks(self):
        procs = [self.dyn("env=RANK", nproc=n) for n in (2, 1, 2)]
        self.check_ranks(self.wait_all(procs), 5)

    def test_separate_rendezvous_server(self):
        server = subprocess.Popen([RENDEZVOUS, "--rdzv-id", "dynjob",
                                   "--nnodes", "3", "--host", "127.0.0.1", "--port", str(self.port)],
                                  env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        time.sleep(0.3)
        procs = [self.dyn("env=RANK") for _ in range(3)]
        results = self.wait_all(procs)
        self.check_ranks(results, 3)
        for res in results:
            self.assertNotIn("listening on", res.stderr.decode(), res)
        self.assertEqual(self.wait_all([server])[0].code, 0)

    def test_the_server_and_the_agents_take_the_same_token_from_the_same_settings(self):
        # Issue 31: DDPRUN_TOKEN=A in the environment and a token file holding B given to both programs: the
        # agents took the file's, the separate server the environment's, and every node exited 77.
        token = self.path("token")
        with open(token, "w") as f:
            f.write("from-the-file\n")
        self.env["DDPRUN_TOKEN"] = "from-the-environment"
        server = subprocess.Popen([RENDEZVOUS, "--rdzv-id", "dynjob",
                                   "--nnodes", "3", "--host", "127.0.0.1", "--port", str(self.port),
                                   "--token-file", token],
                                  env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        procs = [self.dyn("env=RANK", extra=("--rdzv-token-file", token)) for _ in range(3)]
        results = self.wait_all(procs)
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.check_ranks(results, 3)
        self.assertEqual(self.wait_all([server])[0].code, 0)

    def test_failure_reaches_every_dynamic_node(self):
        procs = [self.dyn(f"ready={self.ready}", f"@1:waitfile={self.go}", "@1:exit=9", "hang") for _ in range(3)]
        self.wait_ready(3)
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 9, res)
