"""The stalled-console fixture shared by test_stalled_console.py and test_supervisor_matrix.py: ddprun's stdout on a
pipe whose read end the test holds without reading (draining it later is the reader coming back), its stderr in a
file, and the checks of the worker lines that came through."""
import os
import re
import signal
import subprocess
import threading
import time

from harness import DDPRUN, pid_alive
from multinode import MultiNodeCase
from wait import wait_until

PROMPT = 5.0  # generous bound for "at once" (the figure, in docs/BENCHMARKS.md, is milliseconds)


class StalledConsole:
    """ddprun's stdout: a pipe nobody reads until drain() starts a reader that reads to the end."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self.data = bytearray()
        self.thread = None

    def drain(self):
        def reader():
            while True:
                chunk = os.read(self.read_fd, 1 << 20)
                if not chunk:
                    break
                self.data += chunk
            os.close(self.read_fd)
        self.thread = threading.Thread(target=reader, daemon=True)
        self.thread.start()

    def close_reader(self):
        os.close(self.read_fd)

    def text(self):
        self.thread.join(timeout=30)
        return self.data.decode(errors="replace")


def without_cut_last_line(numbers):
    """A worker killed in the middle of its write(2) leaves its last line cut short ("rank 0 line 16" for line
    167568), which ddprun ends with a newline at end of file: that line is the worker's loss, not ddprun's."""
    expected = len(numbers) - 1
    if numbers and numbers[-1] != expected and str(expected).startswith(str(numbers[-1])):
        return numbers[:-1]
    return numbers


def line_numbers(text, rank):
    return [int(m) for m in re.findall(rf"^\[rank{rank}\]: rank {rank} line (\d+)$", text, re.M)]


class ConsoleCase(MultiNodeCase):
    def start_on(self, console, *args):
        """ddprun with stdout on the stalled console, stderr to a file (read at the end)."""
        self.err_path = self.path(f"stderr.{len(os.listdir(self.tmp))}")
        err = open(self.err_path, "wb")
        proc = subprocess.Popen([DDPRUN, *map(str, args)], stdout=console.write_fd, stderr=err,
                                stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        err.close()
        os.close(console.write_fd)
        return proc

    def stderr_of(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def pids(self, pidfile):
        return [pid for pid, _ in self.read_pids(pidfile).values()]

    def wait_gone(self, pids, timeout=PROMPT):
        """When the last of `pids` was seen gone (time.monotonic())."""
        wait_until(lambda: not any(pid_alive(p) for p in pids),
                   lambda: f"workers {[p for p in pids if pid_alive(p)]} to be gone", timeout)
        return time.monotonic()

    def finish(self, proc, timeout=60):
        try:
            return proc.wait(timeout=timeout)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise

    def assert_contiguous(self, text, rank, at_least=1, killed=False):
        numbers = line_numbers(text, rank)
        if killed:
            numbers = without_cut_last_line(numbers)
        self.assertGreaterEqual(len(numbers), at_least, text[-2000:])
        self.assertEqual(numbers, list(range(len(numbers))), f"rank {rank}'s lines have a gap or are out of order")
