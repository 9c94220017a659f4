"""Shared machinery for ddprun's integration tests.

The test process makes itself a child subreaper, so every process ddprun or its workers leave behind -
even a double-forked, setsid'd one - is re-parented to the test and shows up in `descendants()`.
Every test ends by asserting that nothing is left, and kills whatever is, so a failing test cannot
leak processes into the next one.
"""
import ctypes
import json
import os
import signal
import subprocess
import time
import unittest

import event_schema
from temp_dirs import temp_dir
from wait import wait_until

DDPRUN = os.environ.get("DDPRUN", os.path.join(os.path.dirname(__file__), "../../build/launcher/ddprun"))
WORKER = os.environ.get("TEST_WORKER", os.path.join(os.path.dirname(__file__), "../../build/tests/bin/test_worker"))
# The standalone server, beside ddprun in the build tree (DDPRUN_RENDEZVOUS for an installed one).
RENDEZVOUS = os.environ.get("DDPRUN_RENDEZVOUS",
                            os.path.join(os.path.dirname(DDPRUN), "../rendezvous/ddprun-rendezvous"))

PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _parents():
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()
        out[int(entry)] = (int(fields[1]), fields[0].decode())
    return out


# Processes a fixture keeps for a whole test class (the fault lab's delay lines): not left behind by a test, and
# never killed by one; the fixture ends them.
FIXTURE_PIDS = set()


def descendants(root=None, include_zombies=False):
    """Live descendants of `root` (default: this test process), but for FIXTURE_PIDS."""
    root = os.getpid() if root is None else root
    parents = _parents()
    children = {}
    for pid, (ppid, state) in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child in FIXTURE_PIDS:
                continue
            todo.append(child)
            if include_zombies or parents[child][1] != "Z":
                found.append(child)
    return found


def reap_zombies():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def comm(pid):
    """The process's name (/proc/PID/comm), or "" when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def kill_all(pids):
    """SIGKILLs each of `pids`; one already gone is fine."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:].split()[0] != b"Z"
    except OSError:
        return False


def wait_gone(pids, timeout):
    """Waits until none of `pids` is alive (zombies count as gone); returns those still alive. Not wait_until:
    the caller asserts on the survivors, or goes on with them (a benchmark kills and counts them)."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        reap_zombies()
        alive = [p for p in alive if pid_alive(p)]
        if alive:
            time.sleep(0.01)
    return alive


def read_until(proc, out, marker, what):
    """Reads proc's stdout (plain os.read: a buffered reader would keep bytes that communicate() then never
    sees) until `marker` appears after what `out` already holds; returns everything read."""
    start = len(out)
    while marker not in out[start:]:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            raise AssertionError(f"ddprun ended before {what}: {out.decode(errors='replace')}")
        out += chunk
    return out


class Result:
    def __init__(self, proc, stdout, stderr, elapsed):
        self.code = proc.returncode
        self.stdout = stdout
        self.stderr = stderr
        self.elapsed = elapsed

    def text(self):
        return self.stdout.decode(errors="replace") + self.stderr.decode(errors="replace")

    def __repr__(self):
        return f"exit {self.code} after {self.elapsed:.2f}s\n--- stdout\n{self.stdout[-3000:].decode(errors='replace')}\n--- stderr\n{self.stderr[-3000:].decode(errors='replace')}"


class DdprunTestCase(unittest.TestCase):
    """Runs ddprun, asserts no process is left at the end of each test."""

    def setUp(self):
        self.tmp = temp_dir(self, "ddprun_it_")
        self.env = dict(os.environ)
        self.env.pop("DDPRUN_LOG_LEVEL", None)
        # ddprun's temporary run directories land here, so a test that SIGKILLs ddprun leaves nothing in /tmp.
        self.env["TMPDIR"] = self.tmp
        # The private runtime directory (common/runtime_dir.hpp): the agents' live-view sockets and the round a
        # ddprun-rendezvous keeps for its restart, per test, so that a SIGKILLed server leaves no file behind.
        # Beside self.tmp, not in it: tests check what ddprun leaves there.
        self.env["XDG_RUNTIME_DIR"] = temp_dir(self, "ddprun_xdg_")

    def tearDown(self):
        reap_zombies()
        # Not wait_until: whatever is left after 5 s is killed first, then the test fails on it.
        deadline = time.monotonic() + 5
        left = descendants()
        while left and time.monotonic() < deadline:
            time.sleep(0.02)
            reap_zombies()
            left = descendants()
        kill_all(left)
        reap_zombies()
        self.assertEqual(left, [], "processes left behind after the test")

    def path(self, name):
        return os.path.join(self.tmp, name)

    def start(self, *args, stdin=subprocess.DEVNULL, cwd=None, program=None):
        """`cwd`: ddprun's working directory (DDPRUN is then made absolute; so must a relative WORKER be).
        `program`: another name of ddprun's (DDPRUN_LAUNCH), DDPRUN when None."""
        ddprun = program or DDPRUN
        ddprun = ddprun if cwd is None else os.path.abspath(ddprun)
        return subprocess.Popen([ddprun, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=stdin, env=self.env, start_new_session=True, cwd=cwd)

    def run_ddprun(self, *args, timeout=60, cwd=None, program=None):
        t0 = time.monotonic()
        proc = self.start(*args, cwd=cwd, program=program)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            self.fail(f"ddprun did not finish within {timeout}s:\n{out[-2000:]!r}\n{err[-2000:]!r}")
        return Result(proc, out, err, time.monotonic() - t0)

    def worker(self, *steps, nproc=2, extra=()):
        return self.run_ddprun("--nproc-per-node", nproc, *extra, WORKER, *steps)

    def assert_refused(self, args, code, words, cwd=None):
        """Runs ddprun with `args` and checks a refusal: exit `code`, nothing on stdout, one line on stderr
        ("ddprun: error: ...") holding each of `words`, no worker started and no file created in self.tmp.
        The subclass sets self.marker_dir, the directory its workers would leave a ready file in."""
        before = sorted(os.listdir(self.tmp))
        r = self.run_ddprun(*args, cwd=cwd)
        err = r.stderr.decode()
        self.assertEqual(r.code, code, f"{args}: {r}")
        self.assertEqual(r.stdout, b"", f"{args}: {r}")
        self.assertEqual(len(err.splitlines()), 1, f"{args}: expected one line: {r}")
        self.assertTrue(err.startswith("ddprun: error: "), f"{args}: {r}")
        for w in words:
            self.assertIn(w, err, f"{args}: {r}")
        self.assertEqual(os.listdir(self.marker_dir), [], f"{args}: a worker was started")
        self.assertEqual(sorted(os.listdir(self.tmp)), before, f"{args}: files were created")

    def stderr_until(self, proc, needle, timeout, seen=b"", why="never said", count=1):
        """Reads proc's stderr without blocking until `needle` appears `count` times in all that was read (`seen`:
        what an earlier call returned, counted too); after `timeout` s fails with `why` and the tail. Returns all
        read. The pipe is blocking again afterwards, so whatever follows stays for communicate()."""
        os.set_blocking(proc.stderr.fileno(), False)

        def said():
            nonlocal seen
            if seen.count(needle) < count:
                seen += proc.stderr.read() or b""
            return seen.count(needle) >= count
        try:
            wait_until(said, lambda: f"{needle!r} on stderr ({why}):\n{seen[-2000:]!r}", timeout)
        finally:
            os.set_blocking(proc.stderr.fileno(), True)
        return seen

    def wait_for_files(self, paths, timeout=10):
        wait_until(lambda: all(os.path.exists(p) for p in paths),
                   lambda: f"the files {[p for p in paths if not os.path.exists(p)]}", timeout, interval=0.005)

    def read_pids(self, pidfile):
        pids = {}
        with open(pidfile) as f:
            for line in f:
                rank, pid, pgid = map(int, line.split())
                pids[rank] = (pid, pgid)
        return pids

    def events(self, path):
        """The events file at `path`, every line checked against docs/events.schema.json (event_schema.py)."""
        with open(path) as f:
            return event_schema.check([json.loads(line) for line in f], path)
