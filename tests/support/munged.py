"""A private munged for tests: its own key, socket, pid, log and seed files in a temp dir, stopped at the end.

    with PrivateMunged() as socket_path: ...      # raises unittest.SkipTest when munged cannot start

As a program it runs a command beside one, with DDPRUN_MUNGE_SOCKET set, and exits with the command's status
(77, ctest's skip code, when munged cannot start):
    python3 munged.py -- COMMAND ARGS...

munged wants to run as root here (it is started as the user who owns the key) and checks permissions: the
key, pid, log and seed live in a 0700 directory; the socket's directory must be searchable by every user
(0755), so that a test can show that a process of another user is refused by ddprun, not by munged.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

MUNGED = shutil.which("munged") or "/usr/sbin/munged"
MUNGEKEY = shutil.which("mungekey") or "/usr/sbin/mungekey"


class PrivateMunged:
    def __init__(self, start_timeout=10.0):
        self.start_timeout = start_timeout
        self.dir = None
        self.proc = None
        self.socket = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        if not os.path.exists(MUNGED) or not os.path.exists(MUNGEKEY):
            raise unittest.SkipTest("munged/mungekey not installed (Debian package munge; scripts/setup)")
        self.dir = tempfile.mkdtemp(prefix="ddprun-munged-")
        os.chmod(self.dir, 0o755)
        private = os.path.join(self.dir, "private")
        os.mkdir(private, 0o700)
        self.socket = os.path.join(self.dir, "munge.socket")
        try:
            key = os.path.join(private, "munge.key")
            made = subprocess.run([MUNGEKEY, "--create", "--keyfile", key], capture_output=True, text=True)
            if made.returncode != 0:
                self._give_up("mungekey failed: " + made.stderr.strip())
            self.proc = subprocess.Popen(
                [MUNGED, "--foreground", "--force", f"--socket={self.socket}", f"--key-file={key}",
                 f"--pid-file={private}/munged.pid", f"--log-file={private}/munged.log",
                 f"--seed-file={private}/munged.seed"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            deadline = time.monotonic() + self.start_timeout
            while not os.path.exists(self.socket):
                if self.proc.poll() is not None:
                    self._give_up("munged exited: " + self.proc.stderr.read().decode(errors="replace").strip())
                if time.monotonic() > deadline:
                    self._give_up(f"munged made no socket within {self.start_timeout} s")
                time.sleep(0.02)
            return self.socket
        except BaseException:
            self.stop()
            raise

    def _give_up(self, why):
        raise unittest.SkipTest("cannot start a private munged: " + why)

    def kill(self):
        """munged gone as if it crashed (its socket file is left behind, as a crash leaves it)."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def main(argv):
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: munged.py -- COMMAND ARGS...", file=sys.stderr)
        return 64
    command = argv[argv.index("--") + 1:]
    try:
        with PrivateMunged() as socket_path:
            env = dict(os.environ, DDPRUN_MUNGE_SOCKET=socket_path)
            return subprocess.run(command, env=env).returncode
    except unittest.SkipTest as e:
        print(f"SKIP: {e}", file=sys.stderr)
        return 77


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
