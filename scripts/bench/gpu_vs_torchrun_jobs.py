"""One job of scripts/bench/gpu_vs_torchrun.py: start the launchers, time their exits and their workers', and count
what is left behind. Importing tests/support/harness.py makes this process a child subreaper, so a process
that a launcher leaves is re-parented here and found by descendants()."""
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from harness import descendants, kill_all, reap_zombies, wait_gone  # noqa: E402
from ports import free_port  # noqa: E402


def tail(path, size=800):
    with open(path, errors="replace") as f:
        return f.read()[-size:]


class Job:
    """Runs `cmds` at once (each launcher in a session of its own; "{dir}" in an argument is the run's folder,
    where workers write ready.RANK = pid and the failing one writes `mark` = time.time() of its failure). Waits for
    every launcher up to `timeout` s, or `cap` s after the mark; one still running then is killed (rc "running").
    Then waits up to GRACE_S for every other descendant; those still alive are `left` (and killed)."""
    GRACE_S = 3.0
    free_port = staticmethod(free_port)

    def __init__(self, cmds, env, tmp, timeout, stdin=None, cap=None):
        self.folder = tempfile.mkdtemp(dir=tmp, prefix="run.")
        self.poller, self.fds, self.exits, self.seen = select.poll(), {}, {}, set()
        self.watched = set()
        self.mark = self.gone = None
        self.left = self.alive_at_kill = 0
        self.procs, self.logs = [], []
        self.start = time.time()
        try:
            for i, cmd in enumerate(cmds):
                self.logs.append(os.path.join(self.folder, f"launcher{i}.log"))
                with open(self.logs[-1], "wb") as log, open(stdin or os.devnull, "rb") as inp:
                    argv = [a.replace("{dir}", self.folder) for a in cmd]
                    self.procs.append(subprocess.Popen(argv, env=env, stdin=inp, stdout=log, stderr=subprocess.STDOUT,
                                                       start_new_session=True))
                self._watch(self.procs[-1].pid, f"launcher{i}")
            self._wait_launchers(timeout, cap)
            self._wait_rest()
            self.train_s = self._read("train_s")
            self.log_tail = "\n".join(tail(log) for log in self.logs)
        finally:
            for proc in self.procs:  # an exception above (^C): never leave a launcher or a worker behind
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            kill_all(descendants())
            for fd in self.fds:
                os.close(fd)
            shutil.rmtree(self.folder, ignore_errors=True)

    def _watch(self, pid, name):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:  # already gone (and reaped by its parent)
            return
        self.fds[fd] = name
        self.watched.add(pid)
        self.poller.register(fd, select.POLLIN)

    def _read(self, name):
        try:
            with open(os.path.join(self.folder, name)) as f:
                return float(f.read())
        except OSError:
            return None

    def _adopt_workers(self):
        for entry in os.listdir(self.folder):
            if entry.startswith("ready.") and not entry.endswith(".tmp") and entry not in self.seen:
                self.seen.add(entry)
                self._watch(int(self._read(entry)), "rank" + entry[6:])

    def _poll(self, seconds):
        for fd, _ in self.poller.poll(seconds * 1000):
            self.exits[self.fds[fd]] = time.time()
            self.poller.unregister(fd)

    def _wait_launchers(self, timeout, cap):
        deadline = time.monotonic() + timeout
        names = {f"launcher{i}" for i in range(len(self.procs))}
        while not names <= self.exits.keys():
            self._adopt_workers()
            if self.mark is None:
                self.mark = self._read("mark")
                if self.mark is not None and cap:
                    deadline = min(deadline, time.monotonic() + cap - (time.time() - self.mark))
            if time.monotonic() >= deadline:
                break
            self._poll(min(deadline - time.monotonic(), 0.02))
        self.rcs = []
        if not names <= self.exits.keys():  # what is still running at the deadline, launchers included
            self.alive_at_kill = len(descendants())
        for i, proc in enumerate(self.procs):
            if f"launcher{i}" in self.exits:
                self.rcs.append(proc.wait())
                continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            rc = proc.wait()  # it may have exited on its own just now
            self.rcs.append("running" if rc == -signal.SIGKILL else rc)
        if "running" in self.rcs:  # what the launchers still ran is killed here: not "left behind" by them
            alive = descendants()
            kill_all(alive)
            wait_gone(alive, 10)

    def _wait_rest(self):
        """The launchers are reaped: every other process they started must go too."""
        deadline, extra = time.monotonic() + self.GRACE_S, False
        while True:
            self._poll(0)
            reap_zombies()
            alive = descendants()
            if not alive:
                self._poll(0)  # an exit between the poll above and the scan
                ends = list(self.exits.values())
                self.gone = time.time() if extra or not ends else max(ends)
                return
            extra = extra or any(pid not in self.watched for pid in alive)
            if time.monotonic() >= deadline:
                self.left = len(alive)
                kill_all(alive)
                wait_gone(alive, 10)
                return
            self._poll(0.001)

    def summary(self):
        ran = "running" not in self.rcs
        ends = [self.exits.get(f"launcher{i}") for i in range(len(self.procs))]
        last_exit = max(ends) if ran and None not in ends else None

        def since(t0, t1):
            return round((t1 - t0) * 1000, 2) if t0 is not None and t1 is not None else None
        return {"rcs": self.rcs, "wall_ms": since(self.start, last_exit), "exit_ms": since(self.mark, last_exit),
                "gone_ms": since(self.mark, self.gone) if ran and not self.left else None, "left": self.left,
                "capped": int(not ran and self.mark is not None), "alive_at_kill": self.alive_at_kill,
                "train_s": self.train_s, "log_tail": self.log_tail}
