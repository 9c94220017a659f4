"""Admission under a flood of strangers (issue 55): someone holding thousands of idle connections to the rendezvous
port, without ever saying hello, had the server evict the agents' connections in mid-handshake, and the agents did
not try again: a healthy 2-node job failed (74/75). The server now evicts the silent connections first, and an
agent whose connection closes before its hello connects again within its deadline."""
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from multinode import MultiNodeCase
from stranger_flood import StrangerFlood
from wait import wait_until


class StrangerFloodBesideAJob(MultiNodeCase):
    def test_a_two_node_job_ends_0_with_5000_stranger_connections_held_open(self):
        node0 = self.node(0, 2, f"ready={self.ready}", "exit=0")
        wait_until(self.listening, "node 0's rendezvous port", 20)
        flood = StrangerFlood(self.port, 5000).start()
        self.addCleanup(flood.stop)
        time.sleep(1)  # the flood in place before node 1 comes
        node1 = self.node(1, 2, f"ready={self.ready}", "exit=0")
        results = self.wait_all([node0, node1], timeout=60)
        for res in results:
            self.assertEqual(res.code, 0, res)
        self.assertGreater(flood.opened, 5000, "the server closed none of the strangers' connections")
        self.assertIn("connection(s) closed unheard", results[0].stderr.decode())
