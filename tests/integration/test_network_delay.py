"""A slow link (issue 37): two nodes on the lab's switch, node 1 joined to it through a delay line of our own
(netns_lab.NetnsStar with delayed=..., tests/support/delay_line.py: the kernels here have no netem). A 1 s
delay each way (2 s round trips) from before the rendezvous to the end: the join's challenge and proof, the
heartbeats, TCPStore and gloo's connections and all_reduces all cross it, and the job must complete. Then a delay
raised while the workers run, past the heartbeat interval but under its timeout: nothing may be judged. And a
server 4 s away (a round trip longer than a connect attempt's first limit) is reached."""
import os
import subprocess
import time

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
from harness import WORKER
from multinode import LabCase
from python_env import HELPERS, NO_TORCH, torch_python

PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../python"))
CONNECT = ("import socket, sys, time\n"
           "t = time.monotonic()\n"
           "try:\n    socket.create_connection((sys.argv[1], 9), timeout=10)\n"
           "except ConnectionRefusedError:\n    pass\n"
           "print(time.monotonic() - t)")


class SlowLink(LabCase):
    HOSTS, DELAYED = 2, (1,)

    def ddprun_on(self, rank, *program, timeout="15"):
        return self.node_in_lab(rank, 2, "--heartbeat-timeout", timeout, *program,
                                env={**self.env, "GLOO_SOCKET_IFNAME": self.lab.link(rank)})

    def test_the_lab_delays_every_frame_each_way(self):
        # A refused connect is one round trip: the SYN out, the RST back.
        self.lab.delay(1, 300)
        out = subprocess.run([*self.lab.inside(0), "python3", "-c", CONNECT, self.lab.addr[1]], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        self.assertGreaterEqual(float(out), 0.6, out)
        self.assertLess(float(out), 0.6 + 3, out)  # 3 s of room for a loaded machine

    def test_gloo_ranks_rendezvous_and_train_over_a_2_s_round_trip(self):
        if torch_python() is None:
            self.skipTest(NO_TORCH)
        self.env["PYTHON_EXEC"] = torch_python()
        self.env["PYTHONPATH"] = PYTHON_DIR
        self.lab.delay(1, 1000)
        script = os.path.join(HELPERS, "gloo_steps.py")
        procs = [self.ddprun_on(r, script, "--seconds", "1", "--step-ms", "10") for r in range(2)]
        results = self.wait_all(procs, timeout=240)
        for res in results:
            self.assertEqual(res.code, 0, results)

    def test_a_rendezvous_server_4_s_away_is_reached(self):
        # 2 s each way: a connect takes 4 s, longer than the client's first attempt limit (3 s). Before, every
        # attempt was cut at 3 s and the node never joined (until --rdzv-timeout); now each attempt that runs out
        # doubles the next one's limit.
        self.lab.delay(1, 2000)
        procs = [self.ddprun_on(r, WORKER, "exit=0", timeout="20") for r in range(2)]
        results = self.wait_all(procs, timeout=120)
        for res in results:
            self.assertEqual(res.code, 0, results)

    def test_a_delay_raised_while_the_workers_run_judges_nothing(self):
        # Heartbeats every 0.5 s, timeout 4 s; the link goes to 1.5 s each way for 5 s while the workers run, then
        # back. Late beats are not missed beats: both nodes exit 0.
        procs = [self.ddprun_on(r, WORKER, f"ready={self.ready}",
                                  f"waitfile={self.go}", "exit=0", timeout="4") for r in range(2)]
        self.wait_ready(2)
        self.lab.delay(1, 1500)
        time.sleep(5)
        self.lab.delay(1, 0)
        self.release()
        for res in self.wait_all(procs, timeout=60):
            self.assertEqual(res.code, 0, res)
