#!/usr/bin/python3
"""Goodput under node loss (issue 19): the Python Fashion-MNIST example on 3 elastic nodes (loopback), a random
node lost every --kill-every s and started again --restart-after s later, under ddprun and under torchrun 1.13,
against the same job without failures.

  /usr/bin/python3 scripts/bench/goodput.py [--build DIR] [--duration 600] [--kill-every 30] [--restart-after 5]
      [--baseline-duration 180] [--launchers ddprun,torchrun] [--runs 1] [--seed S] [--json OUT] [--keep DIR]

The job. Three "nodes" on this machine, each one launcher with one worker (gloo on CPU, one thread):
`examples/python/fashion_mnist_ddp.py --epochs 1000 --checkpoint CKPT --log-every 1 --data-cache DATA` (every
other option at the example's default: batch 64 per rank, a periodic checkpoint every 50 steps by rank 0), all
three sharing CKPT and DATA (the decoded data set, made by the first start: a node started again reads it instead
of inflating the .gz files; since session 27, before which every start inflated them, ~0.35 s of CPU more).
  ddprun:   ddprun --nnodes 1:3 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:P --rdzv-id goodput
                   --rdzv-conf is_host=false --max-restarts 100 SCRIPT ...   (PYTHON_EXEC=/usr/bin/python3)
            with the rendezvous served by `ddprun-rendezvous --rdzv-id goodput --nnodes 1:3 --host 127.0.0.1
            --port P --max-departures 1000000 --max-restarts 100` (the server's values apply; on one machine
            every node is the same host, and 19 losses in 10 minutes would pass the default bound of 3
            departures per host on real machines too).
  torchrun: /usr/bin/python3 -c TORCHRUN_311 --nnodes 1:3 --nproc_per_node 1 --rdzv_backend c10d
                   --rdzv_endpoint 127.0.0.1:P --rdzv_id goodput --rdzv_conf is_host=false --max_restarts 100
                   SCRIPT ...   (torch 1.13's torchrun with its Python 3.11 fix; --monitor_interval at its
            default, 5 s) with the c10d store served by a TCPStore of its own (`TCPStore(127.0.0.1, P,
            is_master=True)` in a separate Python process).
Both launchers' defaults otherwise (join policy, heartbeats, last call). The rendezvous service runs apart from
the nodes for both: a node that hosts it cannot be lost without ending the job under either launcher (ddprun's
docs/MULTINODE.md "Elastic node counts"; torchrun's agents lose their TCPStore), and here every node may be lost.
Under ddprun the example re-forms in place (its processes stay across a join or a loss: docs/MULTINODE.md
"Re-forming in place"); under torchrun every re-form restarts it. Three variants of ddprun, run only when named in
--launchers, each against ddprun's baseline (without failures they run the same job): `ddprun-restart`, the
example with `--no-reform-in-place` (every re-form restarts the workers, which save on SIGTERM and resume from the
checkpoint, as under torchrun), `ddprun-atfailure`, `ddprun-rendezvous --join-policy at_failure` (a node started
again waits for the next failure instead of re-forming the job at once), and `ddprun-term5`, `--term-timeout 5` on
every node (a worker that has not exited 5 s after the re-form's SIGTERM is SIGKILLed, instead of after 30 s).

A node loss: every process of the node dies at once, as when its machine goes. Each node starts with
GOODPUT_NODE=<run>.<node>.<start> in its environment; its launcher, the launcher's descendants and every process
carrying that variable (ddprun's job guard is double-forked and setsid'd, out of the launcher's tree) are frozen
with SIGSTOP, then SIGKILLed, so no process of the node acts on another's death. Killing the launcher alone would
not be the same loss for the two: ddprun's workers (each in a process group of its own) would die by their
parent-death signal and its guard would clean up, while torch 1.13 starts its workers with a plain Popen (no
parent-death signal, the agent's process group) and they would train on without their agent; killing the
launcher's process group would miss ddprun's workers. Every --kill-every s from the window's start a node chosen
at random (seeded: the same schedule for every launcher) among those running is lost, unless it is the only one
running; --restart-after s later it is started again with the same command line. A launcher that exits by itself
is recorded and started again the same way.

What counts (the example's rank 0 prints `epoch E step S loss L` after every step with --log-every 1, and
`rank 0: resumed from CKPT at step S (restart R, world size W)` when a round starts from the checkpoint (or
`rank 0: re-formed in place at step S (restart R, world size W)` when it took the round up in place); each
line is time-stamped here as it is read from the launcher's stdout):
  - a round = the worker processes of one rendezvous round; it starts at step S of the checkpoint (0 for the
    first, which has all 3 nodes: they start together and both launchers start at MAX) and its steps each
    train on a global batch of 64 x W samples.
  - the final model's lineage: the last round's last step N, then going back round by round: round r
    contributes its steps S_r+1 .. min(S_{r+1}, ...) (the later rounds' starting points), the steps it ran past
    the point the next round started from were thrown away (trained again). A step the checkpoint holds but rank
    0 never printed (rank 0 lost right after the step's all-reduce; the survivors saved it) takes the time of
    the round's last printed step.
  - **counted samples** = sum of the global batch over the lineage's steps completed in the window;
    **goodput** = counted samples / window length. The window starts at the first step after the first periodic
    checkpoint (step 51: warm-up and the first start are left out, and every round after it resumes from a
    checkpoint) and lasts --duration s; after it no node is lost or started, and the job runs until a step
    after the window's end is seen (so that what the window's steps became is known), then every node is lost.
  - baseline: the same job without failures for --baseline-duration s (3 minutes: the rate is steady once
    the job runs), its samples per second over the same kind of window; **ratio** = goodput / baseline rate.
Recorded too: losses, restarts, launcher exits, rounds started in the window, steps and samples thrown away,
stalls (time without a step: re-form, worker start-up, resume), the training rate by world size, the load
average at start and end and every 10 s (the machine is shared).

Everything runs in a temporary directory (TMPDIR of every process too: torchrun's logs, ddprun's run
directories), removed at the end; --keep DIR copies each run's files there first: every node's stdout (node<N>.stdout) and
each launcher's stderr (node<N>.<start>.stderr), every line prefixed with the wall clock when read, ddprun's events
files (`--events-file`, one per node; ddprun starts it afresh, so each earlier start's is renamed
events.node<N>.before<start>.jsonl before the node starts again), the rendezvous service's log. This script is a child subreaper
(tests/support/harness.py): every process of a run is killed at its end, on Ctrl-C or on an error, and checked
gone; so is the port.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
sys.path.insert(0, os.path.join(ROOT, "tests/support"))
sys.path.insert(0, HERE)
from ports import free_port  # noqa: E402
# The integration tests' process tools; importing harness makes this process a child subreaper.
from harness import descendants, kill_all, reap_zombies, wait_gone  # noqa: E402
# torch 1.13's torchrun with its Python 3.11 fix; whether a port is still listened on.
from python_vs_torchrun import PYTHON, TORCHRUN_311, TRAIN  # noqa: E402
from restart_latency import interruptible_runs_of, pump_with_times, still_listening  # noqa: E402

NNODES = 3
BATCH = 64  # per rank: the example's default
CHECKPOINT_EVERY = 50  # the example's default --checkpoint-every
LAUNCHERS = {
    "ddprun": "ddprun (ddprun-rendezvous)",
    "torchrun": "torchrun 1.13, c10d (a TCPStore of its own), monitor 5 s",
    "ddprun-atfailure": "ddprun, join_policy=at_failure",
    "ddprun-term5": "ddprun, --term-timeout 5",
    "ddprun-restart": "ddprun, the example restarting at every re-form (--no-reform-in-place, as under torchrun)",
}
# A launcher whose job without failures is another's: neither the join policy nor the grace period changes
# anything when no node joins or leaves.
BASELINE_OF = {"ddprun-atfailure": "ddprun", "ddprun-term5": "ddprun", "ddprun-restart": "ddprun"}
STEP = re.compile(r"\bepoch \d+ step (\d+) loss ")
# A round's start: rank 0 resumed from the checkpoint (a restart), or took the new round up in place.
RESUMED = re.compile(r"\brank 0: (?:resumed from \S+|re-formed in place) at step (\d+) \(restart \d+, world size (\d+)\)")
STORE = """
import signal, sys
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False,
                 timeout=timedelta(seconds=3600))
print("listening", flush=True)
signal.pause()
"""


def parse(line):
    """("step", S) or ("resumed", S, W) for the example's lines that matter here, else None."""
    m = STEP.search(line)
    if m:
        return ("step", int(m.group(1)))
    m = RESUMED.search(line)
    if m:
        return ("resumed", int(m.group(1)), int(m.group(2)))
    return None


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def marked(marker):
    """Every live process whose environment carries GOODPUT_NODE=marker: a node's every process, wherever it went
    (ddprun's job guard is double-forked and setsid'd: not a descendant of its ddprun)."""
    entry = f"GOODPUT_NODE={marker}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if entry in read_bytes(f"/proc/{pid}/environ").split(b"\0"):
                    found.append(int(pid))
            except OSError:
                pass
    return found


def stop_tree(proc, marker=None):
    """A node (or service) lost at once: the process, every descendant and every process carrying the node's
    marker frozen with SIGSTOP, then SIGKILLed; returns its exit status and how long it took from the first
    look at /proc to the last SIGKILL sent (the node sits frozen meanwhile, and its peers wait for it), the
    orphans reaped (they are re-parented to this subreaper as their parents die)."""
    begun = time.monotonic()
    every = lambda: [proc.pid] + descendants(proc.pid) + (marked(marker) if marker else [])  # noqa: E731
    pids = every()
    for _ in range(2):  # the second pass: anything forked before its parent froze
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        pids = list(dict.fromkeys(pids + every()))
    kill_all(pids)
    frozen_s = time.monotonic() - begun
    code = proc.wait()
    orphans = set(pids) - {proc.pid}
    deadline = time.monotonic() + 5
    while orphans and time.monotonic() < deadline:
        for pid in list(orphans):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    orphans.discard(pid)
            except ChildProcessError:  # not yet re-parented to us, or reaped by its own parent
                if not os.path.exists(f"/proc/{pid}"):
                    orphans.discard(pid)
        time.sleep(0.01)
    return code, frozen_s


class Job:
    """One run: the rendezvous service, NNODES nodes, their stdout lines time-stamped as read."""

    def __init__(self, launcher, build, tmp):
        self.launcher, self.build, self.tmp = launcher, build, tmp
        self.port = free_port()
        self.ckpt = os.path.join(tmp, "ckpt.pt")
        self.env = dict(os.environ, PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1", TMPDIR=tmp,
                        DDPRUN_TOKEN="goodput-bench", LOGLEVEL="INFO")  # LOGLEVEL: torchrun's agents' own log
        self.lines = []  # (monotonic time, node, event) for the lines parse() knows
        self.lock = threading.Lock()
        self.t0 = None  # the window's start: the first step after the first periodic checkpoint
        self.window_open = threading.Event()
        self.nodes = [None] * NNODES
        self.markers = [None] * NNODES  # GOODPUT_NODE in the environment of every process of the node
        self.incarnation = 0
        self.pumps = []
        self.started = []  # every launcher started: its stderr pipe is closed at the end
        self.service = None

    def node_command(self, node):
        script = [TRAIN, "--epochs", "1000", "--checkpoint", self.ckpt, "--log-every", "1",
                  "--data-cache", os.path.join(self.tmp, "data")]
        if self.launcher.startswith("ddprun"):
            return [os.path.join(self.build, "launcher/ddprun"), "--nnodes", f"1:{NNODES}", "--nproc-per-node", "1",
                    "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "goodput",
                    "--rdzv-conf", "is_host=false", "--max-restarts", "100",
                    "--events-file", os.path.join(self.tmp, f"events.node{node}.jsonl")] + \
                (["--term-timeout", "5"] if self.launcher == "ddprun-term5" else []) + script + \
                (["--no-reform-in-place"] if self.launcher == "ddprun-restart" else [])
        return [PYTHON, "-c", TORCHRUN_311, "--nnodes", f"1:{NNODES}", "--nproc_per_node", "1",
                "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{self.port}", "--rdzv_id", "goodput",
                "--rdzv_conf", "is_host=false", "--max_restarts", "100"] + script

    def start_service(self):
        log = open(os.path.join(self.tmp, "service.log"), "wb")
        if self.launcher.startswith("ddprun"):
            port_file = os.path.join(self.tmp, "port")
            cmd = [os.path.join(self.build, "rendezvous/ddprun-rendezvous"), "--rdzv-id", "goodput", "--nnodes",
                   f"1:{NNODES}", "--host", "127.0.0.1", "--port", str(self.port), "--max-departures", "1000000",
                   "--max-restarts", "100", "--port-file", port_file]
            if self.launcher == "ddprun-atfailure":
                cmd += ["--join-policy", "at_failure"]
            ready = lambda: os.path.exists(port_file) and os.path.getsize(port_file) > 0  # noqa: E731
        else:
            cmd = [PYTHON, "-c", STORE, str(self.port)]
            ready = lambda: b"listening" in read_bytes(log.name)  # noqa: E731
        self.service = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                        start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while not ready():
            if self.service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the rendezvous service did not start: {read_bytes(log.name)[-2000:]!r}")
            time.sleep(0.05)

    def start_node(self, node):
        events = os.path.join(self.tmp, f"events.node{node}.jsonl")
        if os.path.exists(events):  # ddprun starts its --events-file afresh: the earlier start's is kept aside
            os.replace(events, os.path.join(self.tmp, f"events.node{node}.before{self.incarnation + 1}.jsonl"))
        self.incarnation += 1
        marker = f"{os.path.basename(self.tmp)}.{node}.{self.incarnation}"
        proc = subprocess.Popen(self.node_command(node), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(self.env, GOODPUT_NODE=marker), start_new_session=True, cwd=self.tmp)
        self.nodes[node], self.markers[node] = proc, marker
        self.started.append(proc)
        # The launcher's log, each line stamped with the wall clock as read (torchrun's has no times of its own).
        err = os.path.join(self.tmp, f"node{node}.{self.incarnation}.stderr")
        for pump in (threading.Thread(target=self.pump, args=(node, proc.stdout), daemon=True),
                     threading.Thread(target=pump_with_times, args=(proc.stderr, err), daemon=True)):
            pump.start()
            self.pumps.append(pump)

    def pump(self, node, pipe):
        with open(os.path.join(self.tmp, f"node{node}.stdout"), "ab") as out:
            for raw in iter(pipe.readline, b""):
                t = time.monotonic()
                out.write(b"%.6f " % time.time() + raw)  # kept (--keep) stamped as the launchers' logs are
                event = parse(raw.decode(errors="replace"))
                if event is None:
                    continue
                with self.lock:
                    self.lines.append((t, node, event))
                    if self.t0 is None and event[0] == "step" and event[1] > CHECKPOINT_EVERY:
                        self.t0 = t
                        self.window_open.set()
        pipe.close()

    def running(self, node):
        return self.nodes[node] is not None and self.nodes[node].poll() is None

    def lose(self, node):
        """Returns how long the node sat frozen before its processes were killed (stop_tree)."""
        _code, frozen_s = stop_tree(self.nodes[node], self.markers[node])
        self.nodes[node] = None
        return frozen_s

    def last_step_time(self):
        with self.lock:
            return max((t for t, _, e in self.lines if e[0] == "step"), default=None)

    def close(self):
        """Every process of the run gone, the port free; returns what had to be killed beyond the nodes."""
        for node, proc in enumerate(self.nodes):
            if proc is not None:
                stop_tree(proc, self.markers[node])
                self.nodes[node] = None
        if self.service is not None:
            stop_tree(self.service)
        for pump in self.pumps:
            pump.join(timeout=5)
        for proc in self.started:
            proc.stderr.close()
        left = descendants()
        kill_all(left)
        wait_gone(left, 5)
        reap_zombies()
        if still_listening(self.port):
            left.append(f"a listener on port {self.port}")
        return left


def rounds_of(events):
    """The rounds in the order they ran: [{start, world, t, steps: [(step, time)]}] from the time-ordered events."""
    rounds = [{"start": 0, "world": NNODES, "t": None, "steps": []}]
    for t, _node, e in events:
        if e[0] == "resumed":
            rounds.append({"start": e[1], "world": e[2], "t": t, "steps": []})
        else:
            r = rounds[-1]
            last = r["steps"][-1][0] if r["steps"] else r["start"]
            if e[1] <= last:  # never seen: a round whose `resumed` line went missing; counted as one from e[1] - 1
                rounds.append({"start": e[1] - 1, "world": r["world"], "t": t, "steps": [], "unannounced": True})
            rounds[-1]["steps"].append((e[1], t))
    return rounds


def lineage(rounds):
    """The final model's steps {step: (time, global batch)} and the steps thrown away [(time, global batch)]."""
    kept, thrown, upper = {}, [], None
    for r in reversed(rounds):
        gb = BATCH * r["world"]
        last = r["steps"][-1][0] if r["steps"] else r["start"]
        upper = last if upper is None else upper
        when = r["t"]
        logged = dict(r["steps"])
        for n in range(r["start"] + 1, upper + 1):
            when = logged.get(n, when)  # unprinted (rank 0 lost after the all-reduce): the last printed step's time
            kept[n] = (when, gb)
        thrown += [(t, gb) for n, t in r["steps"] if n > upper]
        upper = min(upper, r["start"])
    return kept, thrown


def analyse(job, t_end, losses, starts):
    """The run's figures over the window (t0, t_end]."""
    with job.lock:
        events = sorted(job.lines, key=lambda x: x[0])
    rounds = rounds_of(events)
    kept, thrown = lineage(rounds)
    t0 = job.t0
    inside = lambda t: t is not None and t0 < t <= t_end  # noqa: E731
    unix_offset = time.time() - time.monotonic()
    to_unix = lambda t: round(t + unix_offset, 3)  # noqa: E731
    duration = t_end - t0
    counted = sum(gb for t, gb in kept.values() if inside(t))
    thrown_in = [(t, gb) for t, gb in thrown if inside(t)]
    # Stalls: stretches without a step, from the steps printed in the window (kept or not), with where each came
    # from (the loss or the restart just before it) and its two parts: the last step → the new round's `resumed`
    # line (stop, re-form, worker start-up: interpreter, import torch, init_process_group, checkpoint load), and
    # `resumed` → its first step (DDP's broadcast, the data set, skipping the epoch's done batches, the step).
    step_times = sorted(t for t, _n, e in events if e[0] == "step" and inside(t))
    stalls = []
    for r_prev, r in zip(rounds, rounds[1:]):
        if not inside(r["t"]):
            continue
        before = max((t for t in step_times if t < r["t"]), default=t0)
        first = r["steps"][0][1] if r["steps"] else None
        # What the round followed: a loss since the last step, a node started again since the round before (its
        # meet comes seconds after its start: the interpreter, torch, the data set), or both (one re-form for two).
        since = r_prev["t"] if r_prev["t"] is not None else t0
        causes = sorted([(t, "loss") for t in losses if before - 1 <= t <= r["t"]] +
                        [(t, "start") for t in starts if since < t <= r["t"]])
        stalls.append({"at": round(before - t0, 1), "after": "+".join(c for _t, c in causes) or "?",
                       "unix": [to_unix(before), to_unix(first or r["t"])],
                       "world": r["world"],
                       "to_resumed": round(r["t"] - before, 2),
                       "to_first_step": round(first - r["t"], 2) if first else None})
    gaps = [b - a for a, b in zip(step_times, step_times[1:])]
    typical = statistics.median(gaps) if gaps else 0
    stalled = sum(g for g in gaps if g > max(1.0, 5 * typical))
    # The rate while training, by world size (stalls left out).
    # The time at a smaller world is also split: while the lost node is away, and once it started again (its
    # launcher, interpreter and imports run on the same machine here, beside the ranks that train).
    by_world = {}
    w_small = {"away": [0.0, 0], "joiner_starting": [0.0, 0]}
    for r in rounds:
        ts = [(n, t) for n, t in r["steps"] if inside(t)]
        for a, b in zip(ts, ts[1:]):
            if b[1] - a[1] > max(1.0, 5 * typical):
                continue
            parts = [by_world.setdefault(r["world"], [0.0, 0])]
            if r["world"] < NNODES and r["t"] is not None:
                parts.append(w_small["joiner_starting" if any(r["t"] <= s <= a[1] for s in starts) else "away"])
            for part in parts:
                part[0] += b[1] - a[1]
                part[1] += BATCH * r["world"]
    return {
        "window_start_unix": to_unix(t0),
        "window_s": round(duration, 1),
        "counted_samples": counted,
        "samples_per_s": round(counted / duration, 2),
        "thrown_steps": len(thrown_in),
        "thrown_samples": sum(gb for _t, gb in thrown_in),
        "rounds_in_window": sum(1 for r in rounds if inside(r["t"])),
        "unannounced_rounds": sum(1 for r in rounds if r.get("unannounced")),
        "final_step": max(kept, default=0),
        "stalled_s": round(stalled, 1),
        "step_s_median": round(typical, 4),
        "rate_by_world": {str(w): round(s / t, 1) for w, (t, s) in sorted(by_world.items()) if t > 0},
        "rate_smaller_world": {k: {"samples_per_s": round(n / t, 1), "seconds": round(t, 1)}
                               for k, (t, n) in w_small.items() if t > 0},
        "stalls": stalls,
    }


# A worker that outlived the launcher's grace period after SIGTERM, in ddprun's and torchrun 1.13's logs.
GRACE_OVER = re.compile(r"grace period of \d+ ms over: sending SIGKILL|Unable to shutdown process .* forcefully")


def grace_kills(tmp):
    """When a launcher's grace period ran out (a worker SIGKILLed after its SIGTERM), from the time-stamped
    launcher logs: wall-clock times."""
    times = []
    for name in os.listdir(tmp):
        if name.endswith(".stderr"):
            with open(os.path.join(tmp, name), errors="replace") as f:
                for line in f:
                    stamp, _, text = line.partition(" ")
                    if GRACE_OVER.search(text):
                        times.append(float(stamp))
    return times


def stall_summary(stalls):
    """{what the stall followed: [count, seconds in all, median seconds]}: last step → the next round's first."""
    by = {}
    for st in stalls:
        if st["to_first_step"] is not None:
            by.setdefault(st["after"], []).append(st["to_resumed"] + st["to_first_step"])
    return {k: [len(v), round(sum(v), 1), round(statistics.median(v), 2)] for k, v in sorted(by.items())}


def loss_split(r):
    """Where a chaos run's goodput went, as fractions of its window at its own full-world rate (W=3 in the same
    run), not at the baseline's: the baseline ran minutes earlier, and on a shared machine the two rates differ by
    up to ±4% from run to run (session 26), which is then all the ratio shows. The parts: the lost node away (its
    share of the machine goes to whatever else runs there, not to the two nodes left), a lost node's worker
    starting again (its interpreter and imports take the cores the others train on: three nodes share one machine
    here), the stalls beyond one step's time (the step under way at a loss, the re-form, the first step of the
    new round), and the rest (steps thrown away, the window's ends). None when the run never had its full world."""
    full = r["rate_by_world"].get(str(NNODES))
    if not full or r["kind"] != "chaos":
        return None
    def part(k):  # the samples not trained while at the smaller world for reason k, at the full world's rate
        time_at = r["rate_smaller_world"].get(k, {"seconds": 0, "samples_per_s": full})
        return time_at["seconds"] * (1 - time_at["samples_per_s"] / full) / r["window_s"]

    stalls = sum(v[1] for v in r["stall_by_cause"].values())
    count = sum(v[0] for v in r["stall_by_cause"].values())
    split = {"goodput_of_full_world": r["samples_per_s"] / full, "away": part("away"),
             "joiner_starting": part("joiner_starting"),
             "stalls_beyond_a_step": (stalls - count * r["step_s_median"]) / r["window_s"]}
    split["rest"] = 1 - sum(split.values())
    return {k: round(v, 4) for k, v in split.items()}


def run_job(launcher, build, duration, kill_every, restart_after, seed, keep):
    """One run (kill_every 0: the baseline). Returns its figures."""
    tmp = tempfile.mkdtemp(prefix="ddprun_goodput_")
    job = Job(launcher, build, tmp)
    rng = random.Random(seed)
    losses, starts, exits, loads, frozen = [], [], [], [], []
    result = {"launcher": launcher, "kind": "chaos" if kill_every else "baseline", "seed": seed,
              "load_start": os.getloadavg(), "started_utc": time.strftime("%H:%M:%S", time.gmtime())}
    try:
        job.start_service()
        for node in range(NNODES):
            job.start_node(node)
        if not job.window_open.wait(timeout=600):
            raise RuntimeError("no step past the first periodic checkpoint within 600 s")
        t0 = job.t0
        t_end = t0 + duration
        next_loss = t0 + kill_every if kill_every else float("inf")
        next_load = t0
        pending = {}  # node → when it starts again
        while time.monotonic() < t_end:
            now = time.monotonic()
            if now >= next_load:
                loads.append(os.getloadavg()[0])
                next_load += 10
            for node, when in list(pending.items()):
                if now >= when:
                    del pending[node]
                    job.start_node(node)
                    starts.append(now)
            for node in range(NNODES):
                if job.nodes[node] is not None and job.nodes[node].poll() is not None:
                    code = job.nodes[node].returncode
                    exits.append((round(now - t0, 1), node, code))
                    print(f"  {now - t0:6.1f} s: node {node}'s launcher exited {code} by itself", flush=True)
                    job.nodes[node] = None
                    pending[node] = now + restart_after
            if now >= next_loss:
                next_loss += kill_every
                alive = [n for n in range(NNODES) if job.running(n)]
                if len(alive) < 2:
                    print(f"  {now - t0:6.1f} s: only {len(alive)} node running, no loss this time", flush=True)
                else:
                    node = rng.choice(alive)
                    frozen.append(job.lose(node))
                    losses.append(now)
                    print(f"  {now - t0:6.1f} s: node {node} lost", flush=True)
                    pending[node] = now + restart_after
            time.sleep(0.05)
        # The window is over: no more losses or starts. Run on until a step after it shows what its steps became.
        deadline = time.monotonic() + 240
        while (job.last_step_time() or 0) <= t_end + 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        if (job.last_step_time() or 0) <= t_end + 1:
            result["warning"] = "no step within 240 s after the window"
        result["load_end"] = os.getloadavg()
        result.update(analyse(job, t_end, losses, starts))
        result.update({"losses": len(losses), "restarts": len(starts), "launcher_exits": exits,
                       "load_1min_every_10s": loads,
                       "load_median": round(statistics.median(loads), 2) if loads else None,
                       "loss_times": [round(t - t0, 1) for t in losses],
                       # The bench's own part of each loss's stall: finding and freezing the node's processes.
                       "frozen_before_kill_s_median": round(statistics.median(frozen), 3) if frozen else None})
        return result
    finally:
        left = job.close()
        if "window_start_unix" in result:
            # A stall in which a worker outlived its launcher's grace period is labelled so ("+grace").
            start, kills = result["window_start_unix"], grace_kills(tmp)
            result["grace_kills"] = sum(1 for t in kills if start <= t <= start + duration)
            for st in result["stalls"]:
                if any(st["unix"][0] <= t <= st["unix"][1] for t in kills):
                    st["after"] += "+grace"
            result["stall_by_cause"] = stall_summary(result["stalls"])
            result["loss_split"] = loss_split(result)
        if left:
            result["left_behind"] = left
            print(f"  left behind, killed: {left}", flush=True)
        if keep:
            dest = os.path.join(keep, f"{launcher}-{result['kind']}-{seed}-{result['started_utc'].replace(':', '')}")
            shutil.copytree(tmp, dest, ignore=shutil.ignore_patterns("ckpt.pt*", "torchelastic_*", "ddprun*", "data"))
        shutil.rmtree(tmp, ignore_errors=True)


def describe(r):
    extra = ""
    if r["kind"] == "chaos":
        extra = (f", {r['losses']} losses, {r['restarts']} restarts, {len(r['launcher_exits'])} launcher exits, "
                 f"{r['rounds_in_window']} rounds, {r['thrown_steps']} steps thrown away "
                 f"({r['thrown_samples']} samples), {r['stalled_s']} s stalled; stalls by what came before "
                 f"[count, s, median s] {r['stall_by_cause']}; grace periods run out {r['grace_kills']}; "
                 f"at a smaller world {r['rate_smaller_world']}; a lost node frozen before its kill "
                 f"{r['frozen_before_kill_s_median']} s (median); of the full world's rate {r['loss_split']}")
    return (f"{r['launcher']} {r['kind']}: {r['counted_samples']} samples in {r['window_s']} s = "
            f"{r['samples_per_s']} samples/s (by world size {r['rate_by_world']}){extra}; load "
            f"{r['load_start'][0]:.2f} → {r['load_end'][0]:.2f}, median {r['load_median']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--duration", type=float, default=600,
                    help="the window with failures, seconds (600; 0: baselines only)")
    ap.add_argument("--kill-every", type=float, default=30, help="a node lost every SEC s (30)")
    ap.add_argument("--restart-after", type=float, default=5, help="a lost node starts again SEC s later (5)")
    ap.add_argument("--baseline-duration", type=float, default=180,
                    help="the window without failures, seconds (180; 0: no baseline)")
    ap.add_argument("--launchers", default=",".join(LAUNCHERS))
    ap.add_argument("--runs", type=int, default=1, help="rounds, each running every launcher's baseline and chaos")
    ap.add_argument("--seed", type=int, default=20261125, help="the losses' schedule (run i uses seed + i)")
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--keep", help="copy each run's logs into this directory")
    args = ap.parse_args()
    launchers = interruptible_runs_of(args.launchers, LAUNCHERS)
    build = os.path.abspath(args.build)
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {os.uname().nodename}, {os.cpu_count()} "
          f"CPUs, build {build}; load average {os.getloadavg()}", flush=True)
    results = []
    try:
        for i in range(args.runs):
            plan = ([(k, "baseline") for k in launchers if k not in BASELINE_OF] if args.baseline_duration else []) \
                + ([(k, "chaos") for k in launchers] if args.duration else [])
            for launcher, kind in plan:
                chaos = kind == "chaos"
                r = run_job(launcher, build, args.duration if chaos else args.baseline_duration,
                            args.kill_every if chaos else 0, args.restart_after, args.seed + i, args.keep)
                r["run"] = i
                results.append(r)
                print(describe(r), flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(results, f, indent=1)
    finally:
        kill_all(descendants())
        reap_zombies()
    print(f"\n# {time.strftime('%H:%M:%S UTC', time.gmtime())}; load average {os.getloadavg()}\n")
    print("| launcher | without failures (samples/s) | goodput with failures (samples/s) | ratio | losses, "
          "rounds | steps thrown away | stalled | grace periods run out |")
    print("|---|---|---|---|---|---|---|---|")
    for k in launchers:
        base = [r["samples_per_s"] for r in results
                if r["launcher"] == BASELINE_OF.get(k, k) and r["kind"] == "baseline"]
        chaos = [r for r in results if r["launcher"] == k and r["kind"] == "chaos"]
        ratios = [c["samples_per_s"] / b for c, b in zip(chaos, base)] if base else []
        ratio = f"**{statistics.median(ratios):.1%}**" if ratios else "—"
        if len(ratios) > 1:
            ratio += f" ({', '.join(f'{x:.1%}' for x in ratios)})"
        print(f"| {LAUNCHERS[k]} | {', '.join(f'{b:.1f}' for b in base) or '—'} | "
              f"{', '.join(str(c['samples_per_s']) for c in chaos)} | {ratio} | "
              f"{', '.join(f'''{c['losses']}, {c['rounds_in_window']}''' for c in chaos)} | "
              f"{', '.join(str(c['thrown_steps']) for c in chaos)} | "
              f"{', '.join(f'''{c['stalled_s']} s''' for c in chaos)} | "
              f"{', '.join(str(c.get('grace_kills')) for c in chaos)} |")
    print("\n| launcher, run | goodput / its full world's rate (W=3, same run) | lost node away | joiner starting | "
          "stalls beyond one step | rest |")
    print("|---|---|---|---|---|---|")
    for r in results:
        if r.get("loss_split"):
            sp = r["loss_split"]
            print(f"| {LAUNCHERS[r['launcher']]}, {r['run'] + 1} | {sp['goodput_of_full_world']:.1%} | "
                  f"{sp['away']:.1%} | {sp['joiner_starting']:.1%} | {sp['stalls_beyond_a_step']:.1%} | {sp['rest']:.1%} |")
    return 1 if any("left_behind" in r or "warning" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
