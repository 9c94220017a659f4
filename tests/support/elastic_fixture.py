"""The fixture of the elastic tests (test_elastic.py, test_reform_in_place.py, test_pictures.py): ElasticCase runs
ddprun agents on loopback that share one dynamic rendezvous (--nnodes MIN:MAX, --rdzv-endpoint 127.0.0.1:PORT;
the first agent to bind it hosts the server in-process), each with its own events file; worker_runs() and
Round read back what each node ran."""
import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import event_schema
from exit_codes import RDZV_REFUSED
from harness import DDPRUN, WORKER, pid_alive
from multinode import MultiNodeCase
from ports import listening
from wait import wait_until

REFUSED = RDZV_REFUSED
ENV_NAMES = ("TORCHELASTIC_RESTART_COUNT", "WORLD_SIZE", "RANK", "TORCHELASTIC_MAX_RESTARTS")
BOUND = 20  # seconds: every "ends within" of these tests; each takes a few seconds on an idle machine
# --rdzv-conf last_call_timeout of a job that starts below MAX: every node started at once joins within it.
LAST_CALL = 3


def worker_runs(stdout):
    """The workers a node ran, from its stdout: a list of {NAME: value, "prefix": rank} per worker, oldest first."""
    lines = {}
    for line in stdout.decode(errors="replace").splitlines():
        if not line.startswith("[rank") or "]: " not in line:
            continue
        prefix, text = line.split("]: ", 1)
        name, _, value = text.partition("=")
        if name in ENV_NAMES:
            lines.setdefault(int(prefix[len("[rank"):]), []).append((name, value))
    runs = []
    for prefix, seq in lines.items():
        # One block per worker, each starting with ENV_NAMES[0]. A worker of a round that a quick second re-form
        # stopped may have printed only the start of its block; any other block must be whole and in order.
        starts = [i for i, (n, _) in enumerate(seq) if n == ENV_NAMES[0]] + [len(seq)]
        if starts[0] != 0:
            raise AssertionError(f"rank {prefix}: lines out of order: {seq}")
        for k, (i, j) in enumerate(zip(starts, starts[1:])):
            block = seq[i:j]
            names = [n for n, _ in block]
            if names != list(ENV_NAMES)[:len(names)]:
                raise AssertionError(f"rank {prefix}: lines out of order: {seq}")
            if len(names) < len(ENV_NAMES):
                if k == len(starts) - 2:  # the last worker of this rank prefix ran to its end
                    raise AssertionError(f"rank {prefix}: a worker printed part of its environment: {seq}")
                continue  # stopped by the next re-form while it printed
            run = {n: int(v) for n, v in block}
            run["prefix"] = prefix
            runs.append(run)
    return runs


class Round(collections.namedtuple("Round", "restart_count nnodes world_size node_rank rank_offset")):
    """One rendezvous of one node, as its events file tells it (rounds()); equal to the plain 5-tuple."""
    __slots__ = ()

    @property
    def world(self):
        """(restart_count, nnodes, world_size): what every node of the round agrees on."""
        return self[:3]


class ElasticCase(MultiNodeCase):
    """MultiNodeCase's endpoint port, ready directory and go file; agents on a dynamic endpoint instead of static
    node ranks, each with its own events file."""

    def setUp(self):
        super().setUp()
        self.pids = self.path("pids")
        self.env["DDPRUN_TOKEN"] = "elastic-token"
        self.agents = []

    def third_node_killed_ends_the_job(self, nnodes, steps, **options):
        """Agents a (the host), b and c of an `nnodes` job, two workers each running `steps`; once all six are
        ready c's ddprun is SIGKILLed, and a and b must both end with exit 1 and c's node as the root cause.
        Returns {"a": result, "b": result}."""
        a = self.host_agent(nnodes, *steps, name="a", **options)
        b = self.agent(nnodes, *steps, name="b", **options)
        c = self.agent(nnodes, *steps, name="c", **options)
        self.wait_ready(range(6))
        lost = self.rounds("c")[0].node_rank
        os.kill(c.pid, signal.SIGKILL)
        results = dict(zip("ab", self.wait_all([a, b])))
        self.wait_all([c])
        for res in results.values():
            self.assertEqual(res.code, 1, res)
            self.assertIn(f"root cause: node {lost} (host {socket.gethostname()}) lost", res.stderr.decode(), res)
        return results

    def tearDown(self):
        # A test that failed half-way may leave agents running: kill them (their workers die with them: the job
        # guard), then the harness checks that nothing at all is left.
        left = [a for a in self.agents if a.poll() is None]
        for a in left:
            try:
                os.killpg(a.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for a in self.agents:
            a.communicate()
        super().tearDown()
        self.assertEqual([a.pid for a in left], [], "agents still running at the end of the test")

    def agent(self, nnodes, *steps, name, nproc=2, max_restarts=0, last_call=10, term_timeout=2, log_file=False,
              rdzv_timeout=BOUND, extra=(), rdzv_conf=""):
        """One node: ddprun --nnodes NNODES on the shared endpoint; its events go to ev_NAME.jsonl, and with
        log_file its stderr to err_NAME.log (readable while it runs) instead of a pipe."""
        args = [DDPRUN, "--nnodes", nnodes, "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "elastic",
                "--rdzv-conf", f"last_call_timeout={last_call}" + (f",{rdzv_conf}" if rdzv_conf else ""),
                "--nproc-per-node", nproc,
                "--max-restarts", max_restarts, "--heartbeat-interval", "0.2", "--heartbeat-timeout", "1",
                "--rdzv-timeout", rdzv_timeout, "--term-timeout", term_timeout, "--events-file",
                self.path(f"ev_{name}.jsonl"), *extra, WORKER, *[f"env={n}" for n in ENV_NAMES],
                f"pidfile={self.pids}", *steps]
        stderr = open(self.path(f"err_{name}.log"), "wb") if log_file else subprocess.PIPE
        try:
            p = subprocess.Popen(list(map(str, args)), stdout=subprocess.PIPE, stderr=stderr,
                                 stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        finally:
            if log_file:
                stderr.close()
        p.name = name
        p.log_file = self.path(f"err_{name}.log") if log_file else None
        self.agents.append(p)
        return p

    def log_of(self, p):
        with open(p.log_file, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_for_log(self, p, *texts):
        """Waits until one of `texts` is in the log of `p`; returns the first one found."""
        deadline = time.monotonic() + BOUND
        while True:
            log = self.log_of(p)
            for text in texts:
                if text in log:
                    return text
            if time.monotonic() > deadline:
                self.fail(f"none of {texts!r} in the log of {p.name} within {BOUND}s:\n{log[-3000:]}")
            time.sleep(0.01)

    def host_agent(self, nnodes, *steps, name="host", **kw):
        """The first agent, which hosts the server: returns once the endpoint listens, so the next ones join it."""
        p = self.agent(nnodes, *steps, name=name, **kw)
        deadline = time.monotonic() + BOUND
        while not listening(self.port):
            if p.poll() is not None or time.monotonic() > deadline:
                out, err = p.communicate()
                self.fail(f"the first agent never listened on {self.port}: exit {p.returncode}\n{err[-3000:]!r}")
            time.sleep(0.01)
        return p

    def wait_all(self, procs, timeout=BOUND):
        return super().wait_all(procs, timeout)

    def result_stderr(self, proc, err):
        if proc.log_file:
            with open(proc.log_file, "rb") as f:
                return f.read()
        return err

    def wait_ready(self, ranks):
        self.wait_for_files([os.path.join(self.ready, f"ready.{r}") for r in ranks], timeout=BOUND)

    def clear_ready(self):
        """Forget the round's ready files, so that the next round's show up anew."""
        shutil.rmtree(self.ready)
        os.mkdir(self.ready)

    def release(self):
        with open(self.go, "w"):
            pass

    def release_all_ok(self, procs, names="abc"):
        """Lets the workers finish; every agent of `procs` must exit 0. Returns {name: result}."""
        self.release()
        results = dict(zip(names, self.wait_all(procs)))
        for res in results.values():
            self.assertEqual(res.code, 0, res)
        return results

    def events_of(self, name):
        """Node NAME's events so far: none before its file exists, complete lines only while it is written."""
        try:
            with open(self.path(f"ev_{name}.jsonl")) as f:
                text = f.read()
        except FileNotFoundError:
            return []
        return event_schema.check([json.loads(line) for line in text.split("\n")[:-1]], name)

    def rounds(self, name):
        """A Round (restart_count, nnodes, world_size, node_rank, rank_offset) per rendezvous event of node NAME;
        it compares equal to the plain tuple, so a test may write either."""
        return [Round(e["restart_count"], e["nnodes"], e["world_size"], e["node_rank"], e["rank_offset"])
                for e in self.events_of(name) if e["event"] == "rendezvous"]

    def first_round(self, name):
        """Node NAME's first Round, waiting for it: its events file is written by a thread of its own, so the line
        may come a moment after the workers it started wrote their ready files (a loaded CI machine: IndexError)."""
        wait_until(lambda: self.rounds(name), f"node {name}'s first rendezvous event", BOUND, interval=0.02)
        return self.rounds(name)[0]

    def worlds(self, name):
        """The world of each round of node NAME: [(restart_count, nnodes, world_size), ...]."""
        return [r.world for r in self.rounds(name)]

    def of_event(self, name, kind):
        return [e for e in self.events_of(name) if e["event"] == kind]

    def worker_pids(self, ranks):
        """The pids the workers of `ranks` wrote to the pidfile (the rank's latest worker)."""
        pids = {}
        with open(self.pids) as f:
            for line in f:
                rank, pid, _ = map(int, line.split())
                pids[rank] = pid
        return [pids[r] for r in ranks]

    def assert_gone_within(self, pids, seconds):
        wait_until(lambda: not any(pid_alive(p) for p in pids),
                   lambda: f"the departed node's processes to be gone: {[p for p in pids if pid_alive(p)]} still alive",
                   seconds, interval=0.02)
