"""Randomized multi-node runs (issue 10, figure 4): the generator, the runner and the checks, shared by
tests/integration/test_chaos_multinode.py (a few runs in CI) and scripts/bench/chaos_multinode.py (many).

One run: 2-3 ddprun agents on loopback (dynamic rendezvous: the first agent hosts the server at the endpoint,
the others join it), 1-2 workers each, --max-restarts 0-3, --term-timeout 1, an events file per agent. With
elastic membership (--nnodes MIN:MAX, when the build has it) nodes also join while the job runs, and nodes
leave (their agent SIGKILLed or stopped by SIGTERM/SIGINT). The failures, drawn per run:

  in a worker (planned on its command line): exit N, raise a signal, hang (stops beating: --hang-timeout)
  from outside (sent by this runner at a random time after the round's workers started, or just after an
            agent's "restarting" event: while the job re-forms): a signal to a worker, SIGSTOP to a worker
            (hung), SIGKILL / SIGTERM / SIGINT (now and then SIGHUP / SIGQUIT) to an agent, a new agent (join)

Some workers also start children first (test_worker fork=: in their group, setsid, orphaned, daemons that
ignore SIGTERM), which hold the worker's stdout open and must go with the job like the workers.

Every node gets its own small /bin/sh wrapper that execs tests/bin/test_worker with the steps of the
(round, local rank) it is started for (TORCHELASTIC_RESTART_COUNT, LOCAL_RANK), so a failure happens in one
round only and the next round runs clean. A worker's steps are numbered lines "c NODE ROUND LOCAL_RANK I",
each followed by a line appended to its count file (test_worker's pidfile= step: one write per line, after
the line reached ddprun's pipe), a heartbeat and a 20 ms sleep; then exit 0 (or its planned fate).

Checks (chaos_multinode_check.py), all of them, for every run:
  - every agent ends within RUN_BOUND_S of its start (a hang is a defect);
  - nothing is left: the runner is a child subreaper, and once every agent has exited no descendant may
    live (after an agent's SIGKILL, its job guard gets 5 s, as in test_chaos);
  - rounds: every agent's "rendezvous" events count up by one; all nodes of a round agree on nnodes and
    world size, hold distinct node ranks, ranks = offset + local rank, offsets are prefix sums; the last
    round never exceeds --max-restarts plus the admitted joins; every new round has a cause in the previous
    one (an injected failure or a join); a restartable failure ends the job only when no restart is left;
  - exit codes: every agent of the last round that was not stopped from outside exits the same code, its
    events summary's; 0 only when every worker of the last round exited 0; else the root cause is one of
    the failures injected into that round, with its code (the worker's N, 128+signal, 78 for hung, 1 for a
    lost node, 74 for a lost server, 128+N for an agent's signal);
  - output: on every agent that was not SIGKILLed, each stdout line is "[rankR]: c NODE ROUND LR I" whole,
    R is the rank that worker had in that round, and each worker's lines are 0..m-1 in order with m at
    least the count file's lines (and at most one more: a line written just before the kill, not yet
    counted). SIGKILLed agents' output is not checked (it dies with lines in its pipes, by design).

The run's generator is seeded by (seed, run index) alone: `chaos_multinode.py --seed S --only I` replays one.
"""
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import threading
import time

import exit_codes
import harness  # noqa: F401 (makes this process a child subreaper: whatever a run leaves is ours to find)
from harness import descendants, kill_all, reap_zombies
# read_events: one agent's events; a SIGKILLed agent's last line may be cut (strict=False drops it).
from chaos_support import CHILD_KINDS, describe_pid, read_events, sweep_leftovers
from ports import free_port

TERM_TIMEOUT = 1.0
HANG_TIMEOUT = 2.0
# Each agent, from its own start: a run is at most 4 rounds of ~1.2 s, two hangs (2 s + the stack capture)
# and the teardowns; 20 s is far beyond what a loaded 2-core machine needs.
RUN_BOUND_S = 20.0
GUARD_GRACE_S = 5.0
STEP_S = 0.02
LAST_CALL_S = 0.5
JOINER_RDZV_TIMEOUT_S = 5
LOST_NODE, LOST_SERVER, RDZV_TIMEOUT, REFUSED = 1, exit_codes.RDZV_LOST, exit_codes.RDZV_TIMEOUT, exit_codes.RDZV_REFUSED
HUNG_CODE = exit_codes.HUNG
UNPLANNED_ROUND_CODE = 86  # the wrapper's answer for a (round, local rank) no plan has: a round too many

SELF_SIGNALS = ["SEGV", "ABRT", "KILL", "HUP", "QUIT", "USR1", "PIPE", "FPE", "BUS"]
WORKER_SIGNALS = ["TERM", "KILL", "INT", "SEGV", "HUP", "USR2"]
AGENT_SIGNALS = ["KILL", "TERM", "INT", "HUP", "QUIT"]
INITIAL_IDS = "abc"
JOINER_IDS = "defgh"

LINE_RE = re.compile(rb"^\[rank(\d+)\]: c ([a-h]) (\d+) (\d+) (\d+)$")
ENV_RE = re.compile(rb"^\[rank(\d+)\]: e ([a-h]) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$")


def signum(name):
    return int(getattr(signal, "SIG" + name))


# ---- the plan ---------------------------------------------------------------------------------------------

class Program:
    """What one worker does in one round: `steps` numbered lines, or its fate at step `fate[2]`."""

    def __init__(self, steps, fate=None, children=()):
        self.steps = steps
        self.fate = fate  # None, ("exit", N, k), ("signal", NAME, k), ("hang", None, k)
        # test_worker fork= kinds started first (before pidfile= names the count file, so they add no line to
        # it): they hold the worker's stdout open and must not outlive the job, whatever becomes of their agent.
        self.children = list(children)

    def args(self, node, rc, lr, count):
        out = [f"fork={kind}" for kind in self.children]
        for i in range(self.steps):
            if self.fate and self.fate[2] == i:
                kind, value, _ = self.fate
                out.append({"exit": f"exit={value}", "signal": f"kill={value}", "hang": "hang"}[kind])
                return out
            out += [f"print=c {node} {rc} {lr} {i}", f"pidfile={count}", f"beat={i}", f"sleep={STEP_S}"]
        out.append("exit=0")
        return out

    def expected_status(self):
        """(kind, value) this program ends with by itself, or None for a hang."""
        if not self.fate:
            return ("exit", 0)
        kind, value, _ = self.fate
        if kind == "exit":
            return ("exit", value)
        return ("signal", signum(value)) if kind == "signal" else None


class Event:
    """An injection from outside, `delay` s after the runner saw all of `node`'s workers of round `rc` start."""

    def __init__(self, kind, node, rc, delay, local_rank=None, value=None, joiner=None, when="started"):
        self.kind = kind          # worker_signal, worker_stop, agent_signal, join
        self.when = when          # the trigger: "started" (node's workers of round rc all started) or "reform"
                                  # (node's "restarting" event after round rc: the job re-forms)
        self.node = node          # target (join: the node whose round is the trigger, the host)
        self.rc = rc
        self.delay = delay
        self.local_rank = local_rank
        self.value = value        # a signal name
        self.joiner = joiner      # join: the new node's id

    def describe(self):
        what = {"worker_signal": f"SIG{self.value} to worker {self.node}/{self.local_rank}",
                "worker_stop": f"SIGSTOP to worker {self.node}/{self.local_rank}",
                "agent_signal": f"SIG{self.value} to agent {self.node}",
                "join": f"agent {self.joiner} starts"}[self.kind]
        trigger = "workers started" if self.when == "started" else "re-form began"
        return f"round {self.rc}: {what}, {self.delay:.3f} s after node {self.node}'s {trigger}"


class RunPlan:
    def __init__(self, seed, index):
        self.seed = seed
        self.index = index
        self.elastic = False
        self.min_nodes = self.max_nodes = 2
        self.max_restarts = 0
        self.hang_timeout = 0.0
        self.nproc = {}           # node id -> workers
        self.initial = []         # node ids started at the beginning; the first hosts the rendezvous
        self.programs = {}        # (node, rc, lr) -> Program
        self.events = []          # [Event]
        self.expect = ""          # what the generator expects, for the reader of a report

    @property
    def host(self):
        return self.initial[0]

    def nnodes_arg(self):
        return f"{self.min_nodes}:{self.max_nodes}" if self.elastic else str(self.max_nodes)

    def describe(self):
        lines = [f"nnodes {self.nnodes_arg()}, max-restarts {self.max_restarts}, hang-timeout {self.hang_timeout}, "
                 f"nodes {', '.join(f'{n}x{self.nproc[n]}' for n in self.nproc)} (host {self.host}, "
                 f"initial {''.join(self.initial)})"]
        for (node, rc, lr), p in sorted(self.programs.items()):
            if p.fate:
                kind, value, k = p.fate
                lines.append(f"round {rc}: worker {node}/{lr} {kind}{'=' + str(value) if value else ''} at step {k}"
                             f" of {p.steps}{' children ' + ','.join(p.children) if p.children else ''}")
        lines += [e.describe() for e in self.events]
        lines.append(f"expected: {self.expect}")
        return "\n".join(lines)


def plan_run(seed, index, elastic_ok):
    """The run `index` of `seed`: a pure function of both (and of whether the build has --nnodes MIN:MAX)."""
    rng = random.Random(f"ddprun-chaos-multinode:{seed}:{index}")
    p = RunPlan(seed, index)
    p.elastic = elastic_ok and rng.random() < 0.5
    p.max_restarts = rng.randint(0, 3)
    if p.elastic:
        p.max_nodes = rng.choice([2, 3])
        p.min_nodes = rng.choices(range(1, p.max_nodes + 1), weights=[2] * (p.max_nodes - 1) + [1])[0]
        # Mostly with room for a joiner.
        k = rng.randint(p.min_nodes, p.max_nodes - (p.min_nodes < p.max_nodes and rng.random() < 0.7))
    else:
        p.min_nodes = p.max_nodes = k = rng.choice([2, 3])
    p.initial = list(INITIAL_IDS[:k])
    for n in p.initial:
        p.nproc[n] = rng.randint(1, 2)

    # The sequence of rounds: failures (each uses a restart, the last may end the job) and, elastic, joins.
    n_fail = rng.choices(range(p.max_restarts + 2), weights=[1] + [4] * (p.max_restarts + 1))[0]
    n_join = 0
    if p.elastic:
        room = p.max_nodes - k
        n_join = rng.randint(1, room) if room and (k == 1 or rng.random() < 0.75) else 0
        if rng.random() < 0.2:
            n_join += 1  # one too many: refused while MAX nodes run (or admitted once a node left)
    seq = ["fail"] * max(n_fail - 1, 0) + ["join"] * n_join
    rng.shuffle(seq)
    seq += ["fail"] * (n_fail > 0)  # the last failure may end the job: nothing planned after it
    members = list(p.initial)
    budget = p.max_restarts
    rc = 0
    hangs = 0
    joiners = iter(JOINER_IDS)
    planned_rounds = {}  # rc -> what it is for ("fail", "join", "clean")
    ended = False
    for i, what in enumerate(seq):
        last = i == len(seq) - 1
        if what == "join":
            new = next(joiners)
            p.nproc[new] = rng.randint(1, 2)
            p.events.append(Event("join", p.host, rc, round(rng.uniform(0.0, 0.4), 3), joiner=new))
            planned_rounds.setdefault(rc, "join")
            if len(members) < p.max_nodes:
                members.append(new)
                rc += 1
            continue
        # A failure in round rc.
        kinds = {"exit": 3, "signal": 2, "worker_signal": 2}
        if hangs < 2:
            kinds.update({"hang": 1, "worker_stop": 1})
        if p.elastic:
            leavers = [m for m in members if m != p.host]  # never the host: losing it ends the job, by design
            # A node gone while MIN remain re-forms the job and uses no restart (the budget is for worker failures).
            remaining_ok = len(members) - 1 >= p.min_nodes
        else:
            leavers = list(members)
            remaining_ok = False
        if leavers and (remaining_ok or last):
            # Elastic: a node leaving is the membership change under test, as likely as a worker's failure.
            w = 2.0 if p.elastic else 1.0
            kinds.update({"agent_KILL": 1.5 * w, "agent_TERM": w, "agent_INT": w, "agent_HUP": 0.3 * w,
                          "agent_QUIT": 0.3 * w})
        kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
        planned_rounds[rc] = "fail"
        if kind.startswith("agent_"):
            target = rng.choice(leavers)
            p.events.append(Event("agent_signal", target, rc, None, value=kind[6:]))
            if not remaining_ok:
                ended = True
                break
            members.remove(target)
            rc += 1  # no restart used
            continue
        else:
            _plan_worker_failure(rng, p, kind, members, rc)
            hangs += kind in ("hang", "worker_stop")
            if rng.random() < 0.15:  # a second failure in the same round, racing the first
                second = rng.choice(["exit", "signal", "worker_signal"])
                _plan_worker_failure(rng, p, second, members, rc)
            if budget == 0:
                ended = True
                break
            if rng.random() < 0.25:
                # While the job re-forms after it: a node leaves (elastic: the re-form goes on without it, no
                # further restart; else the job ends) or, elastic, a node joins (placed in the next round).
                if p.elastic and len(members) < p.max_nodes and rng.random() < 0.5:
                    new = next(joiners)
                    p.nproc[new] = rng.randint(1, 2)
                    p.events.append(Event("join", p.host, rc, round(rng.uniform(0.0, 0.05), 3), joiner=new,
                                          when="reform"))
                    members.append(new)
                elif leavers and (len(members) - 1 >= p.min_nodes if p.elastic else last):
                    target = rng.choice(leavers)
                    p.events.append(Event("agent_signal", target, rc, round(rng.uniform(0.0, 0.05), 3),
                                          value=rng.choice(AGENT_SIGNALS), when="reform"))
                    if not p.elastic:
                        ended = True
                        break
                    members.remove(target)
        budget -= 1
        rc += 1
    if not ended:
        planned_rounds.setdefault(rc, "clean")
    p.expect = (f"{rc + 1} round(s), ends by {'a failure' if ended else 'succeeding'}"
                + (f", members at the end {''.join(members)}" if p.elastic else ""))

    # Programs for every round any node might see (a join or a slow node may add rounds): planned rounds as
    # planned, the others short and clean. A round beyond every possibility gets UNPLANNED_ROUND_CODE.
    last_rc = p.max_restarts + 2 * len(JOINER_IDS) + len(p.initial) + 1  # failures, joins, departures
    for n in p.nproc:
        for r in range(last_rc + 1):
            for lr in range(p.nproc[n]):
                if (n, r, lr) in p.programs:
                    continue
                kind = planned_rounds.get(r, "clean")
                steps = rng.randint(5, 25) if kind == "clean" else rng.randint(30, 60)
                p.programs[(n, r, lr)] = Program(steps)
    for prog in p.programs.values():
        if rng.random() < 0.12:
            prog.children = rng.sample(CHILD_KINDS, rng.randint(1, 2))
    # External events' delays, now that every round's lengths are known.
    for e in p.events:
        if e.delay is not None:
            continue
        longest = max(p.programs[(n, e.rc, lr)].steps for n in p.nproc for lr in range(p.nproc[n]))
        e.delay = round(rng.uniform(0.0, 0.9 * longest * STEP_S), 3)
    if hangs or rng.random() < 0.5:
        p.hang_timeout = HANG_TIMEOUT
    return p


def _plan_worker_failure(rng, p, kind, members, rc):
    # A worker of this round that no other failure targets yet, if there is one.
    free = [(n, lr) for n in members for lr in range(p.nproc[n]) if (n, rc, lr) not in p.programs]
    node, lr = rng.choice(free or [(n, lr) for n in members for lr in range(p.nproc[n])])
    steps = rng.randint(30, 60)
    if kind in ("exit", "signal", "hang"):
        value = {"exit": rng.randint(1, 255), "signal": rng.choice(SELF_SIGNALS), "hang": None}[kind]
        # Taken over if another failure of this round already targets this worker: its first plan stands.
        p.programs.setdefault((node, rc, lr), Program(steps, (kind, value, rng.randint(2, steps - 2))))
        return
    p.programs.setdefault((node, rc, lr), Program(steps))
    steps = p.programs[(node, rc, lr)].steps
    delay = round(rng.uniform(0.05, (steps - 3) * STEP_S), 3)
    p.events.append(Event(kind, node, rc, delay, local_rank=lr,
                          value=rng.choice(WORKER_SIGNALS) if kind == "worker_signal" else "STOP"))


# ---- running one plan -------------------------------------------------------------------------------------

class AgentRun:
    """One ddprun agent of a run, its output collected on a thread of its own."""

    def __init__(self, node, cmd, env, events_path, joiner):
        self.node = node
        self.cmd = cmd
        self.events_path = events_path
        self.joiner = joiner
        self.signalled = None     # the signal name the runner sent it, if any
        self.timed_out = False
        self.hung_info = []
        self.stdout = self.stderr = b""
        self.t0 = time.monotonic()
        self.wall0_ms = time.time() * 1000
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        self.elapsed = None
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()

    def _collect(self):
        self.stdout, self.stderr = self.proc.communicate()
        self.elapsed = time.monotonic() - self.t0

    @property
    def code(self):
        return self.proc.returncode

    @property
    def killed(self):
        return self.signalled == "KILL" or self.timed_out


class Injection:
    def __init__(self, kind, node, rc, local_rank=None, value=None, at=None, when="started"):
        self.wall_ms = time.time() * 1000
        self.when = when
        self.kind = kind
        self.node = node
        self.rc = rc
        self.local_rank = local_rank
        self.value = value
        self.at = at

    def __repr__(self):
        lr = f"/{self.local_rank}" if self.local_rank is not None else ""
        return (f"{self.kind}({self.node}{lr} round {self.rc}{' ' + str(self.value) if self.value else ''}"
                f"{' at the re-form' if self.when == 'reform' else ''} at {self.at or 0:.3f} s)")


class RunOutcome:
    def __init__(self):
        self.agents = {}          # node id -> AgentRun
        self.injections = []      # [Injection] sent from outside (worker fates are found afterwards)
        self.left = []
        self.left_info = []
        self.events = {}          # node id -> events
        self.events_error = {}
        self.counts = {}          # (node, rc, lr) -> lines in the count file
        self.elapsed = 0.0
        self.port = 0


class _Watch:
    """What the runner knows of each agent's events file while the run goes: per (node, rc), when all of
    its workers were seen started, and their pids. Reads only what was appended since the last look."""

    def __init__(self, plan, outcome):
        self.plan = plan
        self.o = outcome
        self.started_at = {}      # (node, rc) -> monotonic time all workers of the round were seen
        self.reform_at = {}       # (node, rc) -> monotonic time the node's "restarting" event was seen
        self.pids = {}            # (node, rc, lr) -> pid
        self._files = {}          # node -> [offset, partial line, current rc, {rc: set of local ranks}]

    def poll(self):
        now = time.monotonic()
        for node, a in list(self.o.agents.items()):
            st = self._files.setdefault(node, [0, b"", None, {}])
            try:
                with open(a.events_path, "rb") as f:
                    f.seek(st[0])
                    data = f.read()
            except FileNotFoundError:
                continue
            st[0] += len(data)
            lines = (st[1] + data).split(b"\n")
            st[1] = lines.pop()
            for line in lines:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("event") == "rendezvous":
                    st[2] = e.get("restart_count")
                elif e.get("event") == "restarting" and st[2] is not None:
                    self.reform_at.setdefault((node, st[2]), now)
                elif e.get("event") == "started" and st[2] is not None:
                    rc = st[2]
                    self.pids[(node, rc, e["local_rank"])] = e["pid"]
                    seen = st[3].setdefault(rc, set())
                    seen.add(e["local_rank"])
                    if len(seen) == self.plan.nproc[node]:
                        self.started_at.setdefault((node, rc), now)


def _count_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _signal_worker(o, plan, tmp, watch, e):
    """Sends e's signal to its worker if that worker still runs; returns True (sent), False (gone) or None
    (not yet: a SIGSTOP waits for the worker's first heartbeat, else it would never count as hung)."""
    pid = watch.pids.get((e.node, e.rc, e.local_rank))
    if pid is None:
        return False
    if e.kind == "worker_stop" and _count_lines(os.path.join(tmp, e.node, f"count.{e.rc}.{e.local_rank}")) < 2:
        return None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        # The pidfd pins the process: if it is still the worker of this round (its command line names it) and
        # not a zombie, the signal reaches that worker and no other process.
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if f"print=c {e.node} {e.rc} {e.local_rank} 0".encode() not in f.read():
                return False
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        if data[data.rindex(b")") + 2:].split()[0] == b"Z":
            return False
        signal.pidfd_send_signal(fd, signum(e.value))
        return True
    except (OSError, ProcessLookupError):
        return False
    finally:
        os.close(fd)


def write_wrappers(plan, tmp, worker):
    for node in plan.nproc:
        os.makedirs(os.path.join(tmp, node), exist_ok=True)
        lines = ["#!/bin/sh", "# chaos_multinode: this node's workers, by round and local rank",
                 'case "$TORCHELASTIC_RESTART_COUNT:$LOCAL_RANK" in']
        for (n, rc, lr), prog in sorted(plan.programs.items()):
            if n != node:
                continue
            count = os.path.join(tmp, node, f"count.{rc}.{lr}")
            # The worker's view of the round, from its environment, before it becomes test_worker (same
            # process, same pipe): checked against the rendezvous events.
            lines.append(f'  {rc}:{lr}) echo "e {node} {rc} {lr} $RANK $WORLD_SIZE $GROUP_RANK '
                         f'$TORCHELASTIC_RESTART_COUNT $MASTER_PORT"; exec {shlex.quote(worker)} ' +
                         " ".join(shlex.quote(a) for a in prog.args(node, rc, lr, count)) + " ;;")
        lines.append(f"  *) exec {shlex.quote(worker)} exit={UNPLANNED_ROUND_CODE} ;;")
        lines.append("esac")
        path = os.path.join(tmp, f"worker_{node}.sh")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(path, 0o755)


def agent_command(plan, tmp, ddprun, node, port, joiner):
    cmd = [ddprun, "--nnodes", plan.nnodes_arg(), "--nproc-per-node", str(plan.nproc[node]),
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"chaos-{plan.seed}-{plan.index}",
           "--max-restarts", str(plan.max_restarts), "--term-timeout", str(TERM_TIMEOUT),
           "--events-file", os.path.join(tmp, f"events.{node}.jsonl"),
           "--rdzv-timeout", str(JOINER_RDZV_TIMEOUT_S if joiner else 15)]
    if plan.hang_timeout:
        cmd += ["--hang-timeout", str(plan.hang_timeout)]
    if plan.elastic:
        # A joiner never hosts: one that comes as the job ends would otherwise find the endpoint free and start
        # a job of its own under the same run id (the rule for an agent on the endpoint's machine).
        # Every agent here is the same host: the flapping bound (max_departures) would count them all as one.
        cmd += ["--rdzv-conf", f"last_call_timeout={LAST_CALL_S},max_departures=1000000" +
                (",is_host=false" if joiner else "")]
    return cmd + [os.path.join(tmp, f"worker_{node}.sh")]


def _wait_listening(port, host_agent, bound):
    # Not wait_until: a host agent that never listens is a run's outcome for the checks, not a failed test.
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline and host_agent.proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.003)
    return False


def execute_run(plan, tmp, ddprun, worker, env):
    """Runs `plan` with its files in `tmp`; kills whatever is left at the end (and notes it)."""
    o = RunOutcome()
    o.port = free_port()
    write_wrappers(plan, tmp, worker)
    env = dict(env)
    env.pop("DDPRUN_LOG_LEVEL", None)
    env["DDPRUN_TOKEN"] = f"chaos-token-{plan.seed}-{plan.index}"
    t0 = time.monotonic()

    def start(node, joiner=False):
        node_tmp = os.path.join(tmp, node, "tmp")
        os.makedirs(node_tmp, exist_ok=True)
        o.agents[node] = AgentRun(node, agent_command(plan, tmp, ddprun, node, o.port, joiner),
                                  dict(env, TMPDIR=node_tmp), os.path.join(tmp, f"events.{node}.jsonl"), joiner)

    # The host first: the first agent to bind the endpoint hosts the server, and the plan must know which.
    start(plan.host)
    if _wait_listening(o.port, o.agents[plan.host], RUN_BOUND_S):
        for node in plan.initial[1:]:
            start(node)
    watch = _Watch(plan, o)
    pending = list(plan.events)
    while True:
        watch.poll()
        now = time.monotonic()
        for e in list(pending):
            at = (watch.started_at if e.when == "started" else watch.reform_at).get((e.node, e.rc))
            if at is None or now < at + e.delay:
                continue
            if e.kind == "join":
                pending.remove(e)
                if any(a.proc.poll() is None for a in o.agents.values()):
                    start(e.joiner, joiner=True)
                    o.injections.append(Injection("join", e.joiner, e.rc, at=now - t0, when=e.when))
            elif e.kind == "agent_signal":
                pending.remove(e)
                a = o.agents[e.node]
                if a.proc.poll() is None:
                    a.signalled = e.value
                    a.proc.send_signal(signum(e.value))
                    o.injections.append(Injection("agent_" + e.value.lower(), e.node, e.rc, value=e.value,
                                                  at=now - t0, when=e.when))
            else:
                sent = _signal_worker(o, plan, tmp, watch, e)
                if sent is None:
                    continue
                pending.remove(e)
                if sent:
                    o.injections.append(Injection(e.kind, e.node, e.rc, e.local_rank, e.value, at=now - t0))
        running = [a for a in o.agents.values() if a.proc.poll() is None]
        for a in running:
            if now - a.t0 > RUN_BOUND_S:
                a.timed_out = True
                a.hung_info = [describe_pid(p) for p in descendants()]
                kill_all([a.proc.pid])
        if not running:
            break
        time.sleep(0.003 if pending else 0.02)

    any_killed = any(a.killed for a in o.agents.values())
    for a in o.agents.values():
        a.thread.join(timeout=GUARD_GRACE_S)
    # Every agent has exited and was reaped. As a subreaper this process inherits whatever they left; a live
    # descendant now outlived its agent. After a SIGKILL the job guard works on its own time: the same grace
    # as test_chaos gives it. Not wait_until: a survivor is the checks' to report (sweep_leftovers), with the run.
    deadline = time.monotonic() + (GUARD_GRACE_S if any_killed else 0)
    while time.monotonic() < deadline and descendants():
        reap_zombies()
        time.sleep(0.01)
    o.left, o.left_info = sweep_leftovers()
    for a in o.agents.values():
        a.thread.join(timeout=5)  # a pipe held open by a survivor is closed now
    o.elapsed = time.monotonic() - t0
    for node, a in o.agents.items():
        try:
            o.events[node] = read_events(a.events_path, strict=not a.killed)
        except (OSError, ValueError) as err:
            o.events_error[node] = repr(err)
            o.events[node] = []
    for (node, rc, lr) in plan.programs:
        path = os.path.join(tmp, node, f"count.{rc}.{lr}")
        if os.path.exists(path):
            o.counts[(node, rc, lr)] = _count_lines(path)
    return o


def repro(plan, o, bench="scripts/bench/chaos_multinode.py"):
    cmds = "\n".join(f"  {n}: {shlex.join(a.cmd)}" for n, a in o.agents.items())
    return (f"seed {plan.seed} run {plan.index}: {bench} --seed {plan.seed} --only {plan.index}"
            f"{' --elastic off' if not plan.elastic else ''}\n{plan.describe()}\n"
            f"injected: {o.injections}\nagents (exit, seconds):"
            f" {', '.join(f'{n}: {a.code} {a.elapsed or 0:.2f}' for n, a in o.agents.items())}\n{cmds}")


def has_elastic(ddprun):
    """Whether this ddprun runs --nnodes MIN:MAX: a one-node elastic job of /bin/true succeeds (a build from
    before the elastic work refuses the option, exit 64)."""
    r = subprocess.run([ddprun, "-q", "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-endpoint",
                        f"127.0.0.1:{free_port()}", "--rdzv-id", "chaos-probe", "--rdzv-conf", "last_call_timeout=0.1",
                        "--rdzv-timeout", "10", "/bin/true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL, env=dict(os.environ, DDPRUN_TOKEN="chaos-probe"), timeout=30)
    return r.returncode == 0
