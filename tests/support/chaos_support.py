"""What the chaos harnesses share (tests/integration/test_chaos.py, chaos_multinode.py and its checker, and
scripts/bench's chaos runners): describing and sweeping leftover processes, reading a worker's fate from its
events, no core files."""
import json
import resource
import time

import event_schema
from harness import descendants, kill_all, reap_zombies

# What a worker's children may be (test_worker's fork= step): in its group, setsid'd, orphaned, or a daemon that
# ignores SIGTERM (only SIGKILL ends it).
CHILD_KINDS = ["group", "setsid", "orphan", "daemon"]


def describe_pid(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        state = data[data.rindex(b")") + 2:].split()[0].decode()
        return f"{pid} [{state}] {cmd[:120]}"
    except OSError:
        return f"{pid} (gone)"


def sweep_leftovers():
    """Once every ddprun of a run has exited: the descendants still alive (this process is their subreaper), each
    described, then killed and reaped so that the next run starts clean. Returns (pids, descriptions)."""
    left = descendants()
    info = [describe_pid(p) for p in left]
    kill_all(left)
    # Not wait_until: what is left was found and described already; this only reaps it for the next run.
    deadline = time.monotonic() + 5
    while descendants() and time.monotonic() < deadline:
        reap_zombies()
        time.sleep(0.01)
    reap_zombies()
    return left, info


def status_of(event):
    if "signal" in event:
        return ("signal", event["signal"])
    return ("exit", event.get("exit_code"))


def code_of(status):
    kind, value = status
    return 128 + value if kind == "signal" else value


def limit_core_dumps():
    # Workers kill themselves with SEGV, ABRT, QUIT...: no core files in the test directory.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def read_events(path, strict=False):
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        if strict:
            raise
        return []
    lines = text.splitlines()
    if not strict and lines and not text.endswith("\n"):
        lines.pop()  # a line being written when ddprun was killed
    return event_schema.check([json.loads(line) for line in lines], path)
