"""The multi-node fixture shared by test modules: 2-4 ddprun agents on loopback as separate processes, static node
ranks with --master-addr 127.0.0.1, a ready directory and a go file for the workers (tests/bin/test_worker's
ready= and waitfile= steps). LabCase: the same on the fault lab's switch (netns_lab.NetnsStar), one per class."""
import os
import signal
import socket
import subprocess
import time

from exit_codes import RDZV_LOST, RDZV_REFUSED, RDZV_TIMEOUT
from harness import DDPRUN, DdprunTestCase, Result, WORKER
from netns_lab import NetnsStar
from ports import free_port

REFUSED, TIMEOUT, LOST = RDZV_REFUSED, RDZV_TIMEOUT, RDZV_LOST


class MultiNodeCase(DdprunTestCase):
    def setUp(self):
        super().setUp()
        self.port = free_port()
        self.ready = self.path("ready")
        os.mkdir(self.ready)
        self.go = self.path("go")
        self.env["DDPRUN_TOKEN"] = "test-token"

    def node(self, rank, nnodes, *steps, nproc=1, extra=(), rdzv_timeout=20):
        return self.start("--nnodes", nnodes, "--node-rank", rank, "--master-addr", "127.0.0.1", "--rdzv-port",
                          self.port, "--nproc-per-node", nproc, "--heartbeat-interval", "0.2",
                          "--heartbeat-timeout", "1", "--rdzv-timeout", rdzv_timeout, *extra, WORKER, *steps)

    def wait_all(self, procs, timeout=30):
        results = []
        t0 = time.monotonic()
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1, timeout - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                for q in procs:
                    try:
                        os.killpg(q.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                out, err = p.communicate()
                self.fail(f"ddprun pid {p.pid} did not finish within {timeout}s:\n{err[-3000:]!r}")
            results.append(Result(p, out, self.result_stderr(p, err), time.monotonic() - t0))
        return results

    def result_stderr(self, proc, err):
        """What wait_all reports as `proc`'s stderr: the pipe's (subclasses whose agents log to a file read it)."""
        return err

    def listening(self):
        """Whether node 0's rendezvous port takes connections yet."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def wait_ready(self, world_size):
        self.wait_for_files([os.path.join(self.ready, f"ready.{r}") for r in range(world_size)], timeout=20)

    def release(self):
        with open(self.go, "w"):
            pass


class LabCase(MultiNodeCase):
    """Nodes on the fault lab's switch: HOSTS hosts, those in DELAYED behind a delay line, made once per class
    (skipped, saying why, where namespaces cannot be made). Each test starts on a clean wire: every port up, no
    loss, no delay."""
    HOSTS, DELAYED = 3, ()

    @classmethod
    def setUpClass(cls):
        cls.lab = NetnsStar(f"dd{cls.__name__[:3].lower()}{os.getpid() % 100000}", cls.HOSTS, delayed=cls.DELAYED)

    @classmethod
    def tearDownClass(cls):
        cls.lab.remove()

    def tearDown(self):
        for host in range(self.HOSTS):
            self.lab.heal(host)
        for host in self.DELAYED:
            self.lab.delay(host, 0)
        self.lab.lossless()
        super().tearDown()

    def node_in_lab(self, rank, nnodes, *args, env=None):
        """ddprun on host `rank` as static node `rank` of `nnodes`, host 0's address as --master-addr, one worker,
        heartbeats every 0.5 s; `args`: the other options, the program and its arguments."""
        return subprocess.Popen([*self.lab.inside(rank), os.path.abspath(DDPRUN), "--nnodes", str(nnodes),
                                 "--node-rank", str(rank), "--master-addr", self.lab.addr[0], "--rdzv-port",
                                 str(self.port), "--nproc-per-node", "1", "--heartbeat-interval", "0.5", *args],
                                env=env or self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
