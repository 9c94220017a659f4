"""Multi-host jobs: each node in its own network namespace, joined by a veth pair (10.x addresses exist only
inside namespaces this test creates). Skipped, saying why, where namespaces cannot be made (not root, no
CAP_SYS_ADMIN, no iproute2)."""
import os
import subprocess
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import DDPRUN, WORKER
from multinode import MultiNodeCase, LOST
from netns_lab import NetnsPair, sh


class TwoHosts(MultiNodeCase):
    @classmethod
    def setUpClass(cls):
        cls.pair = NetnsPair(f"ddp{os.getpid() % 100000}")
        cls.ns, cls.veth, cls.addr = cls.pair.ns, cls.pair.veth, cls.pair.addr

    @classmethod
    def tearDownClass(cls):
        cls.pair.remove()

    def setUp(self):
        super().setUp()
        sh("ip", "-n", self.ns[1], "link", "set", self.veth[1], "up")

    def host_node(self, rank, *steps, nproc=2):
        args = ["ip", "netns", "exec", self.ns[rank], os.path.abspath(DDPRUN),
                "--nnodes", "2", "--node-rank", str(rank), "--master-addr", self.addr[0], "--rdzv-port",
                str(self.port), "--nproc-per-node", str(nproc), "--heartbeat-interval", "0.2",
                "--heartbeat-timeout", "1", "--rdzv-timeout", "20", WORKER, *steps]
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                start_new_session=True)

    def test_ranks_and_master_addr_across_hosts(self):
        procs = [self.host_node(r, "env=MASTER_ADDR", "env=RANK") for r in range(2)]
        for node, res in enumerate(self.wait_all(procs)):
            self.assertEqual(res.code, 0, res)
            out = res.stdout.decode()
            self.assertEqual(out.count(f"MASTER_ADDR={self.addr[0]}\n"), 2, res)
            self.assertIn(f"RANK={2 * node + 1}\n", out, res)

    def test_worker_failure_on_the_other_host(self):
        steps = [f"ready={self.ready}", f"@2:waitfile={self.go}", "@2:exit=5", "hang"]
        procs = [self.host_node(r, *steps) for r in range(2)]
        self.wait_ready(4)
        self.release()
        for res in self.wait_all(procs):
            self.assertEqual(res.code, 5, res)
            self.assertIn("root cause: rank 2 (local rank 0, node 1", res.stderr.decode(), res)

    def test_partition_tears_down_both_sides_within_the_heartbeat_deadline(self):
        procs = [self.host_node(r, f"ready={self.ready}", "hang") for r in range(2)]
        self.wait_ready(4)
        t0 = time.monotonic()
        sh("ip", "-n", self.ns[1], "link", "set", self.veth[1], "down")  # silence, no FIN, no RST
        results = self.wait_all(procs)
        elapsed = time.monotonic() - t0
        # Heartbeat timeout 1 s; node 0 then waits one more for node 1 to come back and hear the verdict (a cut
        # may heal: test_network_cuts.py); plus the tick and the teardown.
        self.assertLess(elapsed, 1.0 + 1.0 + 1.5, results)
        self.assertEqual(results[0].code, 1, results[0])
        self.assertIn("root cause: node 1 (host", results[0].stderr.decode(), results[0])
        self.assertEqual(results[1].code, LOST, results[1])
        self.assertIn("lost the rendezvous server", results[1].stderr.decode(), results[1])
