"""Integrity past the handshake (issue 55): a relay between an agent and its rendezvous server (tests/support/
frame_relay.py) that passes the challenge and the proofs through untouched, as anyone who can point agents at
itself (a DNS entry, the etcd key, a port taken first) can, and then changes one frame. Before, it owned the job:
a worker's MASTER_ADDR became 6.6.6.6, a replayed challenge's 24 h heartbeat timeout held agents. Now every frame
after the hello is sealed under keys only the job's token and the connection's two nonces give
(rendezvous/frame_seal.hpp), and the connection's proof covers the challenge's settings: the changed frame ends the
connection, and the agent says why. Node 0 hosts the server on loopback; node 1 reaches it through the relay."""
import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from exit_codes import RDZV_PROTOCOL
from frame_relay import FrameRelay
from harness import WORKER
from multinode import MultiNodeCase, REFUSED, TIMEOUT
from wait import wait_until


class RelayBetweenAgentAndServer(MultiNodeCase):
    def job_through(self, to_agent=None, to_server=None, rdzv_timeout=15):
        """Node 0 (its own server), then node 1 through a relay with these hooks; both run one worker that exits 0.
        Node 0 waits 10 s longer than node 1, so that node 1's own bound, not node 0's end, decides how node 1 ends.
        Returns (relay, [node 0's result, node 1's])."""
        node0 = self.node(0, 2, "exit=0", rdzv_timeout=rdzv_timeout + 10)
        wait_until(self.listening, "node 0's rendezvous port", 20)
        relay = FrameRelay(self.port, to_agent=to_agent, to_server=to_server)
        self.addCleanup(relay.close)
        node1 = self.start("--nnodes", 2, "--node-rank", 1, "--master-addr", "127.0.0.1", "--rdzv-port", relay.port,
                           "--nproc-per-node", 1, "--heartbeat-interval", "0.2", "--heartbeat-timeout", "1",
                           "--rdzv-timeout", rdzv_timeout, WORKER, "exit=0")
        return relay, self.wait_all([node0, node1], timeout=rdzv_timeout + 40)

    def test_a_rewritten_assignment_ends_the_connection_and_starts_no_worker(self):
        # The attack of issue 55 (2 of 2): the round's master rewritten on its way to node 1.
        relay, (res0, res1) = self.job_through(
            to_agent=lambda p: p.replace(b'"master_addr":"127.0.0.1"', b'"master_addr":"6.6.6.6"'))
        self.assertEqual(relay.changed["agent"], 1, "the relay changed no assignment")
        err1 = res1.stderr.decode()
        self.assertEqual(res1.code, RDZV_PROTOCOL, res1)
        self.assertIn("failed its authentication", err1, res1)
        self.assertNotIn("6.6.6.6", err1, res1)  # never believed, never shown as the master
        self.assertNotIn("started 1 worker", err1, res1)
        self.assertNotEqual(res0.code, 0, res0)  # node 1 is lost to the job: it ends, it does not hang

    def test_a_rewritten_challenge_is_not_believed(self):
        # A challenge replayed or changed with a 24 h heartbeat timeout held a joiner (2 of 2). A day is now out of the
        # range an agent accepts from any server (at most an hour); within it, an hour here, the connection's proof
        # covers the settings, so node 1 never trusts that server, and ends at its own --rdzv-timeout.
        relay, (res0, res1) = self.job_through(
            to_agent=lambda p: p.replace(b'"heartbeat_timeout_ms":1000', b'"heartbeat_timeout_ms":3600000'),
            rdzv_timeout=8)
        self.assertGreaterEqual(relay.changed["agent"], 1, "the relay changed no challenge")
        self.assertEqual(res1.code, TIMEOUT, res1)
        self.assertIn("did not prove it knows this job's token and run id", res1.stderr.decode(), res1)
        self.assertLess(res1.elapsed, 8 + 15, res1)
        self.assertEqual(res0.code, TIMEOUT, res0)

    def test_a_rewritten_hello_is_refused(self):
        # The agent's own frames: its hello's worker count changed on the way. The seal does not open at the server,
        # which refuses it as it refuses a wrong token, in the clear.
        relay, (res0, res1) = self.job_through(
            to_server=lambda p: p.replace(b'"nproc":1', b'"nproc":2') if b'"hello"' in p else p, rdzv_timeout=8)
        self.assertEqual(relay.changed["server"], 1, "the relay changed no hello")
        self.assertEqual(res1.code, REFUSED, res1)
        self.assertIn("authentication failed", res1.stderr.decode(), res1)
        self.assertNotEqual(res0.code, 0, res0)
