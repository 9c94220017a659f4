"""Cuts on the wire (issue 37): a separate ddprun-rendezvous on its own host and two nodes on one switch
(netns_lab.NetnsStar). The rendezvous host's port is cut while the nodes still reach each other: the training
does not need the server, so a cut shorter than --rdzv-reconnect-timeout must cost the job nothing. Before, the
server heard from no node for its heartbeat timeout, judged one lost, stopped the job and exited 1, and every
node exited 74 "lost the rendezvous server" with its workers succeeded."""
import os
import subprocess
import time

from harness import DDPRUN, RENDEZVOUS, WORKER
from multinode import MultiNodeCase, LOST
from netns_lab import NetnsStar

SERVER, NODES = 0, (1, 2)


class RendezvousHostCut(MultiNodeCase):
    @classmethod
    def setUpClass(cls):
        cls.lab = NetnsStar(f"ddc{os.getpid() % 100000}", 3)

    @classmethod
    def tearDownClass(cls):
        cls.lab.remove()

    def tearDown(self):
        self.lab.heal(SERVER)
        super().tearDown()

    def server(self, grace):
        proc = subprocess.Popen([*self.lab.inside(SERVER), RENDEZVOUS, "--rdzv-id", "cutjob", "--nnodes", "2",
                                 "--host", self.lab.addr[SERVER], "--port", str(self.port), "--heartbeat-interval",
                                 "0.2", "--heartbeat-timeout", "1", "--rdzv-reconnect-timeout", str(grace)],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.stderr_until(proc, b"listening on", 10, why="the rendezvous server never listened")
        return proc

    def agent(self, host, grace, *steps):
        return subprocess.Popen([*self.lab.inside(host), os.path.abspath(DDPRUN), "--nnodes", "2", "--rdzv-endpoint",
                                 f"{self.lab.addr[SERVER]}:{self.port}", "--rdzv-id", "cutjob", "--rdzv-conf",
                                 "is_host=false", "--rdzv-reconnect-timeout", str(grace), "--nproc-per-node", "1",
                                 WORKER, *steps],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def run_with_cut(self, grace, cut_for, release_during_cut):
        server = self.server(grace)
        agents = [self.agent(h, grace, f"ready={self.ready}", f"waitfile={self.go}", "exit=0") for h in NODES]
        self.wait_ready(2)
        self.lab.cut(SERVER)
        if release_during_cut:
            self.release()  # every worker succeeds while the server cannot hear of it
        time.sleep(cut_for)
        self.lab.heal(SERVER)
        self.release()
        results = self.wait_all(agents, timeout=60)
        srv = self.wait_all([server], timeout=60)[0]
        return srv, results

    def test_a_cut_shorter_than_the_reconnect_timeout_costs_the_job_nothing(self):
        # 3 s of silence against a 1 s heartbeat timeout: each side gives the other up, and takes it back.
        srv, results = self.run_with_cut(grace=20, cut_for=3, release_during_cut=False)
        for res in results:
            self.assertEqual(res.code, 0, (res, srv))
        self.assertEqual(srv.code, 0, srv)
        err = srv.stderr.decode()
        self.assertIn("heard from none of the 2 nodes for 1.0 s: this server is more likely cut off from them", err)
        self.assertRegex(err, r"node \d \(host \"[^\"]+\"\) (reconnected to round 0|is heard again)")

    def test_workers_done_during_the_cut_complete_the_job_once_it_heals(self):
        srv, results = self.run_with_cut(grace=20, cut_for=3, release_during_cut=True)
        for res in results:
            self.assertEqual(res.code, 0, (res, srv))
        self.assertEqual(srv.code, 0, srv)

    def test_a_cut_past_the_reconnect_timeout_says_what_this_node_knows(self):
        # The workers succeed during a 6 s cut; agents and server give up after 2 s. Nobody can say the job
        # completed: exit 74 on the nodes, which say their part succeeded; the server judges the nodes lost.
        srv, results = self.run_with_cut(grace=2, cut_for=6, release_during_cut=True)
        for res in results:
            self.assertEqual(res.code, LOST, res)
            self.assertIn("this node's workers all succeeded, but the end of the job could not be confirmed",
                          res.stderr.decode(), res)
        self.assertEqual(srv.code, 1, srv)
        self.assertIn("in case the rendezvous server's own link was cut", srv.stderr.decode(), srv)
