"""A standalone ddprun-rendezvous is no single point of failure (issue 19): two agents (dynamic node ranks,
--rdzv-endpoint) run test_worker under a separate ddprun-rendezvous on loopback; the server is SIGKILLed while
the workers run. The agents keep their workers and reconnect; a server restarted on the same port rebuilds the
round from what they report (rendezvous/state_machine_resume.cpp), and the job goes on as if nothing happened.
No server within --rdzv-reconnect-timeout: both agents end with the lost-rendezvous code. A restarted server
that hears conflicting claims refuses the later ones."""
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import HUNG, RDZV_TIMEOUT
from harness import DDPRUN, RENDEZVOUS, WORKER
from multinode import MultiNodeCase, LOST, REFUSED
import rdzv_wire
from wait import wait_until

RUN_ID = "restartjob"
BOUND = 20  # seconds: every "ends within" of these tests; each takes a few seconds on an idle machine


def nprocs_fingerprint(nprocs):
    """rendezvous/protocol.cpp's: FNV-1a over each worker count's 4 bytes, little end first, as 16 hex digits."""
    h = 14695981039346656037
    for n in nprocs:
        for shift in range(0, 32, 8):
            h = ((h ^ ((n >> shift) & 0xff)) * 1099511628211) % (1 << 64)
    return f"{h:016x}"


class FakeAgent:
    """Speaks the rendezvous protocol (framing.hpp, auth.hpp) just far enough to make a claim on a round."""

    def __init__(self, port, token, claim, nproc, seat_secret=None, host="fake"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
        hello = {"nproc": nproc, "host": host, "master_port": 1, "resume": claim}
        if seat_secret:  # a seat of its own (auth.hpp: the commitment in the hello, the secret in the claim)
            hello["seat"] = hmac.new(b"ddprun-rdzv/1 seat", seat_secret.encode(), hashlib.sha256).hexdigest()
            claim["seat_secret"] = seat_secret
        _, self.seal_out, self.seal_in = rdzv_wire.join(self.sock.sendall, self.exactly, token, RUN_ID, hello)

    def exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError("the server closed the connection")
            data += chunk
        return data

    def write(self, message):
        self.sock.sendall(rdzv_wire.frame(self.seal_out.seal(json.dumps(message).encode())))

    def read(self):
        """The next message, opened (a refusal in the clear, before anything sealed, as it came)."""
        payload = rdzv_wire.read_frame(self.exactly)
        opened = self.seal_in.open(payload)
        return json.loads(opened if opened is not None else payload)

    def close(self):
        self.sock.close()


class Impostor:
    """Another user's program on the rendezvous port (issue 33): it answers every connection with a challenge it
    cannot prove (it does not know the token) and takes whatever the agent says, answering a hello with a round
    whose master is 6.6.6.6:4444, as an attacker would. Records every byte an agent sent it."""

    def __init__(self, port):
        self.listener = socket.create_server(("127.0.0.1", port))
        self.connections, self.received, self.open = 0, b"", True
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @staticmethod
    def frame(message):
        payload = json.dumps(message).encode()
        return struct.pack(">I", len(payload)) + payload

    def serve(self):
        while self.open:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(1)
                try:
                    conn.sendall(self.frame({"type": "challenge", "proto": "ddprun-rdzv", "v": rdzv_wire.PROTOCOL_VERSION,
                                             "nonce": "ab" * 16,
                                             "heartbeat_interval_ms": 500, "heartbeat_timeout_ms": 5000}))
                    while chunk := conn.recv(65536):
                        self.received += chunk
                        conn.sendall(self.frame({"type": "assignment", "node_rank": 0, "rank_offset": 0, "round": {
                            "nnodes": 1, "world_size": 1, "nprocs_runs": [[1, 1]], "master_addr": "6.6.6.6",
                            "master_port": 4444, "run_id": RUN_ID, "restart_count": 0, "max_restarts": 0}}))
                except OSError:
                    pass

    def close(self):
        self.open = False
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(timeout=5)


class RendezvousRestart(MultiNodeCase):
    def setUp(self):
        super().setUp()
        self.servers = []
        self.agents = []
        self.pidfile = self.path("pids")

    def tearDown(self):
        for p in self.agents + self.servers:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.communicate()
        super().tearDown()

    def server(self, *extra, nnodes="2"):
        proc = subprocess.Popen([RENDEZVOUS, "--rdzv-id", RUN_ID, "--nnodes", nnodes, "--host", "127.0.0.1", "--port",
                                 str(self.port), "--heartbeat-interval", "0.2", "--heartbeat-timeout", "2",
                                 "--rdzv-timeout", str(BOUND), *map(str, extra)], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.servers.append(proc)
        # Its own word, not the port's state: a restarted server may take the round back and end the job before
        # a poll of the port would see it listen.
        proc.seen = self.stderr_until(proc, f"listening on 127.0.0.1:{self.port}".encode(), BOUND, why="never listened")
        return proc

    def agent(self, name, *steps, reconnect=10, nnodes="2", extra=()):
        proc = self.start("--nnodes", nnodes, "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", RUN_ID,
                          "--rdzv-conf", "is_host=false", "--nproc-per-node", 1, "--rdzv-reconnect-timeout",
                          reconnect, "--events-file", self.path(f"{name}.events"), *extra, WORKER, *steps)
        self.agents.append(proc)
        return proc

    def steps(self, *then):
        return [f"pidfile={self.pidfile}", f"ready={self.ready}", f"waitfile={self.go}", *then]

    def kill_server(self, server, agents):
        os.kill(server.pid, signal.SIGKILL)
        server.communicate()
        return [self.stderr_until(a, b"the workers keep training", BOUND, why="no warning of the lost server")
                for a in agents]

    def worker_pids(self):
        with open(self.pidfile) as f:
            return sorted(int(line.split()[1]) for line in f)

    def rendezvous_events(self, name):
        return [e for e in self.events(self.path(f"{name}.events")) if e["event"] == "rendezvous"]

    def first_assignment(self, name):
        """Node `name`'s first rendezvous event, once its events file holds it: the agent's writer thread writes
        the file, so a worker's ready file may come before the line does (seen once in CI under load)."""
        def events():
            try:
                return self.rendezvous_events(name)
            except (FileNotFoundError, ValueError):  # not there yet, or its last line half written
                return []
        return wait_until(events, f"a rendezvous event in {name}'s events file", 10, interval=0.02)[0]

    def restart_under_the_job(self, *steps, down=0.0):
        """Two agents run `steps` after the usual ready/go; the server is SIGKILLed once they are ready and started
        again `down` s later; returns once both agents said they resumed: the agents, their stderr so far, the
        restarted server and the workers' pids."""
        server = self.server()
        agents = [self.agent(n, *self.steps(*steps)) for n in "ab"]
        self.wait_ready(2)
        pids = self.worker_pids()
        seen = self.kill_server(server, agents)
        time.sleep(down)
        restarted = self.server()
        seen = [self.stderr_until(a, b"this node resumed round 0", BOUND, s, "never resumed")
                for a, s in zip(agents, seen)]
        return agents, seen, restarted, pids

    def test_a_restarted_server_takes_the_running_round_back(self):
        agents, seen, restarted, pids = self.restart_under_the_job("exit=0", down=2)
        self.release()
        results = self.wait_all(agents, timeout=BOUND)
        for r, s in zip(results, seen):
            self.assertEqual(r.code, 0, s + r.stderr)
        self.assertEqual(self.worker_pids(), pids)  # never restarted: the pid file has only the first workers
        for n in "ab":
            self.assertEqual([e["restart_count"] for e in self.rendezvous_events(n)], [0])
            link = [e for e in self.events(self.path(f"{n}.events")) if e["event"].startswith("rendezvous_")]
            self.assertEqual([e["event"] for e in link], ["rendezvous_lost", "rendezvous_resumed"], link)
            self.assertIn(link[0]["why"], ("connection closed", "Connection reset by peer"))
            self.assertGreaterEqual(link[1]["time_ms"] - link[0]["time_ms"], 2000)
        out, err = restarted.communicate(timeout=BOUND)
        self.assertEqual(restarted.returncode, 0, err)
        self.assertIn(b"took back round 0 (2 nodes, world size 2", restarted.seen + err)

    def wait_for_connection(self, impostor):
        wait_until(lambda: impostor.connections != 0, "an agent to connect to the impostor", BOUND, interval=0.02)

    def test_a_joiner_trusts_no_program_on_the_port_and_finds_the_real_server(self):
        """Issue 33: another user's program holds the port before the server listens. The agent (a secret token)
        sends it nothing, warns once naming the endpoint, and keeps looking: once the impostor is gone and the real
        server listens, the job runs with the real round's master. Before: the workers got 6.6.6.6:4444."""
        impostor = Impostor(self.port)
        self.addCleanup(lambda: impostor.open and impostor.close())
        agent = self.start("--nnodes", 1, "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", RUN_ID,
                           "--rdzv-conf", "is_host=false", "--nproc-per-node", 1, "--rdzv-timeout", BOUND,
                           "sh", "-c", "echo master=$MASTER_ADDR:$MASTER_PORT")
        self.agents.append(agent)
        self.wait_for_connection(impostor)
        seen = self.stderr_until(agent, b"not trusted; looking for the real rendezvous server", BOUND)
        time.sleep(1)  # a few more tries meet the impostor
        impostor.close()
        server = self.server(nnodes="1")
        out, err = agent.communicate(timeout=BOUND)
        self.assertEqual(agent.returncode, 0, seen + err)
        self.assertEqual(impostor.received, b"", "the agent said something to the impostor")
        self.assertNotIn(b"6.6.6.6", out)
        self.assertRegex(out, rb"master=127\.0\.0\.1:\d+")
        self.assertIn(f"the program at 127.0.0.1:{self.port} did not prove it knows this job's token and run id".encode(),
                      seen)
        self.assertEqual(server.wait(timeout=BOUND), 0)

    def test_a_joiner_that_meets_only_an_impostor_times_out_saying_so(self):
        impostor = Impostor(self.port)
        self.addCleanup(impostor.close)
        agent = self.start("--nnodes", 1, "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", RUN_ID,
                           "--rdzv-conf", "is_host=false", "--nproc-per-node", 1, "--rdzv-timeout", 3,
                           "sh", "-c", "echo master=$MASTER_ADDR:$MASTER_PORT")
        self.agents.append(agent)
        out, err = agent.communicate(timeout=BOUND)
        self.assertEqual(agent.returncode, RDZV_TIMEOUT, err)  # the rendezvous timeout's code
        self.assertEqual(out, b"")  # no worker started
        self.assertEqual(impostor.received, b"")
        self.assertRegex(err, rb"could not reach the rendezvous server at 127\.0\.0\.1:\d+ within 3(\.0)? s \(--rdzv-timeout\): the "
                              rb"program at 127\.0\.0\.1:\d+ did not prove it knows this job's token")

    def test_after_a_server_restart_the_agents_pass_an_impostor_by(self):
        """Issue 33, the restart window: the server is SIGKILLed, another user's program takes the port, the admin
        restarts the server 1 s after it is gone. The agents tell the impostor nothing (no MAC over its nonce, no
        resume claim, no status) and resume with the real server: the job completes."""
        server = self.server()
        agents = [self.agent(n, *self.steps("exit=0")) for n in "ab"]
        self.wait_ready(2)
        pids = self.worker_pids()
        os.kill(server.pid, signal.SIGKILL)
        server.communicate()
        impostor = Impostor(self.port)
        self.addCleanup(lambda: impostor.open and impostor.close())
        self.wait_for_connection(impostor)
        time.sleep(1)
        impostor.close()
        self.server()
        seen = [self.stderr_until(a, b"this node resumed round 0", BOUND, why="never resumed") for a in agents]
        self.release()
        results = self.wait_all(agents, timeout=BOUND)
        for r, s in zip(results, seen):
            self.assertEqual(r.code, 0, s + r.stderr)
            self.assertIn(b"did not prove it knows this job's token", s)
        self.assertEqual(impostor.received, b"", "an agent said something to the impostor")
        self.assertEqual(self.worker_pids(), pids)

    def test_a_worker_failure_after_the_restart_stops_both_nodes(self):
        agents, seen, restarted, _ = self.restart_under_the_job("@1:exit=3", "hang")
        self.release()
        results = self.wait_all(agents, timeout=BOUND)
        for r, s in zip(results, seen):
            self.assertEqual(r.code, 3, s + r.stderr)
        text = b"".join(seen) + b"".join(r.stderr for r in results)
        self.assertIn(b"rank 1", text)
        self.assertIn(b"exited with code 3", text)
        restarted.communicate(timeout=BOUND)
        self.assertEqual(restarted.returncode, 1)

    def test_a_local_failure_while_the_server_is_away_reaches_the_other_node(self):
        server = self.server()
        agents = [self.agent(n, *self.steps("@1:exit=3", "hang")) for n in "ab"]
        self.wait_ready(2)
        seen = self.kill_server(server, agents)
        self.release()  # rank 1 exits 3 while nobody can be told; its node holds the report
        time.sleep(1)
        self.assertIsNone(agents[0].poll())
        self.assertIsNone(agents[1].poll())
        self.server()
        results = self.wait_all(agents, timeout=BOUND)
        for r, s in zip(results, seen):
            self.assertEqual(r.code, 3, s + r.stderr)

    def test_an_elastic_node_that_comes_back_after_the_round_went_on_rejoins_as_a_new_node(self):
        """--nnodes 1:2. The server is SIGKILLed; b's agent is frozen (SIGSTOP) while a new server starts, so only a
        claims round 0: b counts as lost at the adoption's deadline and the job re-forms with a alone (round 1).
        Resumed, b reconnects with its claim of round 0; the server tells it to join again as a new node: it ends
        its stale worker, joins with a plain hello, and round 2 has both nodes again. Both exit 0."""
        server = self.server(nnodes="1:2")
        agents = [self.agent(n, *self.steps("exit=0"), nnodes="1:2") for n in "ab"]
        self.wait_ready(2)
        b_rank = self.first_assignment("b")["rank_offset"]
        with open(self.pidfile) as f:
            stale = [int(line.split()[1]) for line in f if int(line.split()[0]) == b_rank]
        seen = self.kill_server(server, agents)
        os.kill(agents[1].pid, signal.SIGSTOP)
        try:
            shutil.rmtree(self.ready)
            os.mkdir(self.ready)
            restarted = self.server(nnodes="1:2")
            wait_until(lambda: [e["restart_count"] for e in self.rendezvous_events("a")] == [0, 1],
                       "a to re-form without b", BOUND, interval=0.05)
            self.wait_ready(1)
            shutil.rmtree(self.ready)
            os.mkdir(self.ready)
        finally:
            os.kill(agents[1].pid, signal.SIGCONT)
        self.wait_ready(2)  # round 2: b is back
        for pid in stale:
            self.assertFalse(os.path.exists(f"/proc/{pid}"), "b's stale worker still runs")
        self.release()
        results = self.wait_all(agents, timeout=BOUND)
        for r, s in zip(results, seen):
            self.assertEqual(r.code, 0, s + r.stderr)
        b_err = seen[1] + results[1].stderr
        self.assertIn(b"this node was dropped from round 0", b_err)
        self.assertIn(b"joining the job again as a new node", b_err)
        self.assertEqual([e["restart_count"] for e in self.rendezvous_events("a")], [0, 1, 2])
        self.assertEqual([e["restart_count"] for e in self.rendezvous_events("b")], [0, 2])
        self.assertEqual([e["world_size"] for e in self.rendezvous_events("b")], [2, 2])
        out, err = restarted.communicate(timeout=BOUND)
        self.assertIn(b"came back to round 0", restarted.seen + err)

    def test_a_server_lost_while_the_job_re_forms_is_replaced_and_the_next_round_runs(self):
        """--max-restarts 1: rank 1 exits 3, the job re-forms; rank 0 takes 3 s to exit on SIGTERM, and the server
        is SIGKILLed meanwhile. The agents, between rounds, reconnect with a plain hello once their workers are
        down (saying they ran round 0); the restarted server gathers round 1 from them, and it succeeds."""
        marker = self.path("first-round-over")
        # termexit first, before the ready file the test waits for: a SIGTERM that came before it would kill rank 0
        # at once, and the old server could then start round 1 before it is killed.
        steps = ["termexit=3", *self.steps(f"@1:?{marker}:exit=3", f"?{marker}:hang", "exit=0")]
        server = self.server("--max-restarts", 1)
        agents = [self.agent(n, *steps) for n in "ab"]
        self.wait_ready(2)
        open(marker, "w").close()
        shutil.rmtree(self.ready)
        os.mkdir(self.ready)
        self.release()
        seen = [self.stderr_until(a, b"restarting the job", BOUND, why="no restart") for a in agents]
        os.kill(server.pid, signal.SIGKILL)
        server.communicate()
        time.sleep(0.5)
        restarted = self.server("--max-restarts", 1)
        self.wait_ready(2)  # round 1's workers
        results = self.wait_all(agents, timeout=BOUND)
        for r, s in zip(results, seen):
            self.assertEqual(r.code, 0, s + r.stderr)
            self.assertIn(b"between rounds; reconnecting for up to 10.0 s to join the round after round 0", s + r.stderr)
        # Rank 0's node was still taking its worker down (3 s) when the server died: its hello waited for that.
        slow = [self.rendezvous_events(n)[0]["rank_offset"] for n in "ab"].index(0)
        self.assertIn(b"round 0 once this node's workers are down", seen[slow] + results[slow].stderr)
        for n in "ab":
            self.assertEqual([e["restart_count"] for e in self.rendezvous_events(n)], [0, 1])
        out, err = restarted.communicate(timeout=BOUND)
        self.assertEqual(restarted.returncode, 0, err)
        self.assertIn(b"came back after round 0 (its server was lost while the job re-formed): the round gathered "
                      b"here is round 1", restarted.seen + err)

    def test_a_hang_inquiry_lost_with_the_server_is_asked_again_of_the_restarted_one(self):
        """--hang-timeout 2: rank 1 stops beating; its node captures and asks the server for the job-wide verdict,
        but the server was frozen just before and is SIGKILLed after the capture (the inquiry dies with it), then
        restarted. Issue 32: nobody asked again, and the node decided alone 25 s later. Now the node that waits for
        a verdict sends its view again when the new server takes it back; the new server holds it until the
        round is whole, asks the other node, and decides: 78 on both, rank 1 the root cause, no decision alone."""
        server = self.server()
        steps = ["@1:beat=0", "@1:hang", "beatfor=120:100", "exit=0"]
        agents = [self.agent(n, *self.steps(*steps), extra=("--hang-timeout", 2), reconnect=30) for n in "ab"]
        self.wait_ready(2)
        hung_node = 1 if self.first_assignment("b")["rank_offset"] == 1 else 0
        # Frozen before the hang, so that it can never answer the inquiry (the whole inquiry takes milliseconds
        # on an idle machine); the agents take its silence for a loss and reconnect. It dies after the capture.
        os.kill(server.pid, signal.SIGSTOP)
        self.release()
        seen = self.stderr_until(agents[hung_node], b"stacks of every worker in", BOUND, why="no capture")
        os.kill(server.pid, signal.SIGKILL)
        server.communicate()
        self.server()
        results = self.wait_all(agents, timeout=25 + BOUND)
        texts = [r.stderr if i != hung_node else seen + r.stderr for i, r in enumerate(results)]
        for r, text in zip(results, texts):
            self.assertEqual(r.code, HUNG, text)
            self.assertIn(b"root cause: rank 1 (local rank 0, node", text)
        self.assertIn(b"the rendezvous server came back while this node waited for a hang verdict: sending its view "
                      b"again", texts[hung_node])
        self.assertNotIn(b"deciding on this node's workers alone", texts[hung_node])

    def test_no_server_within_the_reconnect_timeout_ends_both_nodes(self):
        server = self.server()
        agents = [self.agent(n, *self.steps("hang"), reconnect=3) for n in "ab"]
        self.wait_ready(2)
        t0 = time.monotonic()
        seen = self.kill_server(server, agents)
        results = self.wait_all(agents, timeout=BOUND)
        elapsed = time.monotonic() - t0
        for r, s in zip(results, seen):
            self.assertEqual(r.code, LOST, s + r.stderr)
            self.assertIn(b"no server took this node back within 3.0 s (--rdzv-reconnect-timeout; ", s + r.stderr)
        self.assertGreaterEqual(elapsed, 3)
        self.assertLess(elapsed, 3 + 5)

    def claim_first(self, make_claim, seat_secret=None):
        """The server is SIGKILLed under two running agents and restarted while they are held still (SIGSTOP), so
        that a token holder's claim (`make_claim()`, once the round runs) is the first it hears; then the agents go
        on. Returns the agents, their stderr so far, the restarted server and the claimer's answer."""
        server = self.server()
        agents = [self.agent(n, *self.steps("exit=0")) for n in "ab"]
        self.wait_ready(2)
        claim = make_claim()
        seen = self.kill_server(server, agents)
        for a in agents:
            os.kill(a.pid, signal.SIGSTOP)
        restarted = self.server()
        fake = FakeAgent(self.port, self.env["DDPRUN_TOKEN"], claim, nproc=1, seat_secret=seat_secret, host="host-a")
        try:
            answer = fake.read()
        finally:
            fake.close()
        for a in agents:
            os.kill(a.pid, signal.SIGCONT)
        return agents, seen, restarted, answer

    def finish_resumed(self, agents, seen, restarted):
        seen = [self.stderr_until(a, b"this node resumed round 0", BOUND, s, "never resumed") for a, s in zip(agents, seen)]
        self.release()
        for r, s in zip(self.wait_all(agents, timeout=BOUND), seen):
            self.assertEqual(r.code, 0, s + r.stderr)
        _, err = restarted.communicate(timeout=BOUND)
        self.assertEqual(restarted.returncode, 0, err)

    def test_a_restarted_server_refuses_a_claim_that_conflicts(self):
        """The restarted server remembers the round it ran (remembered_round.hpp): a claim of another round that
        comes first is refused, not the agents that held the real one (which a server with no memory refused)."""
        claim = {"restart_count": 5, "node_rank": 0, "nnodes": 2, "rank_offset": 0, "world_size": 2,
                 "master_addr": "127.0.0.1", "master_port": 1, "nprocs": "0123456789abcdef"}
        agents, seen, restarted, answer = self.claim_first(lambda: claim)
        self.assertEqual(answer["type"], "error", answer)
        self.assertIn("cannot take back round 5 (2 nodes, world size 2, master 127.0.0.1:1): before its restart this "
                      "server ran round 0 (2 nodes, world size 2", answer["message"])
        self.finish_resumed(agents, seen, restarted)

    def test_an_insider_cannot_claim_another_nodes_place_after_a_restart(self):
        """Issue 33: a token holder that knows the round (its own assignment says it) claims node 0's place first,
        with a seat of its own. The restarted server gave it the place and refused node 0 as a duplicate (exit 77);
        now the place is node 0's agent's alone (the secret behind its seat), and the job completes."""
        def node0s_place():
            round0 = self.first_assignment("a")
            return {"restart_count": 0, "node_rank": 0, "nnodes": 2, "rank_offset": 0, "world_size": 2,
                    "master_addr": round0["master_addr"], "master_port": round0["master_port"],
                    "nprocs": nprocs_fingerprint([1, 1])}
        agents, seen, restarted, answer = self.claim_first(node0s_place, seat_secret="f" * 64)
        self.assertEqual(answer["type"], "error", answer)
        self.assertIn("node rank 0 of round 0 (2 nodes, world size 2, master", answer["message"])
        self.assertIn("is another agent's: this claim does not hold the secret behind that node's seat",
                      answer["message"])
        self.finish_resumed(agents, seen, restarted)
