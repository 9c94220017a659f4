"""Randomized supervision runs on one node: whatever mix of deaths, hangs, stops and escapes the workers
produce, ddprun must exit with the root cause's code, leave no process behind, lose no printed line and
end within a bounded time.

Each run draws 2-4 workers and, per worker, a fate (exit 0 or N after a delay, a self-inflicted signal,
SIGSTOP, hanging, ignoring SIGTERM), children (in the group, setsid, orphaned, daemons ignoring SIGTERM),
output (floods, numbered lines, a last line without its newline) and whether it records the signals it gets
(test_worker sigrecord=, with or without termexit=); a quarter of the runs also send ddprun a signal from
outside (a stop signal, SIGINT twice, a SIGUSR1/2 notice, or SIGKILL). The run's generator is seeded by
(seed, run index) alone, so one failing run is regenerated without the others.

    CHAOS_SEED=S        seed (default: a fixed one, printed at start)
    CHAOS_RUNS=N        number of runs (default 40: ~40 s on two busy cores, release or ASan build)
    CHAOS_ONLY=I        run only run I of that seed (reproducing a failure)
    CHAOS_CHECK_ONCE=0  skip the check that no process gets a signal twice in one teardown (DESIGN "signals
                        are delivered once"; failed in ~40% of runs before e768e0d)
    CHAOS_CHECK_SIGKILLED=0  skip the check that nothing at all outlives a SIGKILLed ddprun (DESIGN "nothing
                        outlives ddprun, even a SIGKILLed one"; before the job guard of 1928a80 only the
                        workers died with it). That workers die with it is always checked.
    CHAOS_CHECK_CONT=0  skip the check that a worker that stopped itself (SIGSTOP) receives the teardown's
                        signal before the grace period's SIGKILL (before 9146573 ddprun sent no SIGCONT: a
                        stopped worker's SIGTERM stayed pending and it always cost the whole --term-timeout)

scripts/bench/chaos.py imports plan_run/execute_run/check_run from here to run many more.

What the checks can and cannot see: the kernel keeps one pending instance of a standard signal, so two
SIGTERMs sent before the process handled the first one are recorded once. The once-check can therefore miss
a double delivery but never invents one.
"""
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import shutil
import time
import unittest

import support_path  # noqa: F401  (puts tests/support, the fixtures, on sys.path)
import harness
from chaos_support import (CHILD_KINDS, code_of, describe_pid, limit_core_dumps, read_events, status_of,
                           sweep_leftovers)
from harness import DdprunTestCase, descendants, kill_all, reap_zombies

TERM_TIMEOUT = 1.0
# The whole run: worker delays are below a second, teardown needs term-timeout; 20 s is far beyond what a
# loaded 2-core machine needs and far below "never ends".
RUN_BOUND_S = 20.0
# From the start of teardown (or the last worker's exit, when stragglers are swept) to the summary: the
# grace period plus scheduling slack on a busy machine.
TEARDOWN_BOUND_S = TERM_TIMEOUT + 8.0
DEFAULT_SEED = 20261123
DEFAULT_RUNS = 40

SELF_SIGNALS = ["SEGV", "ABRT", "KILL", "TERM", "INT", "HUP", "QUIT", "USR1", "PIPE", "BUS", "FPE"]
EXTERNAL_SIGNALS = ["TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL"]
LINE_RE = re.compile(rb"^\[rank(\d+)\]: (.*)$")
NUMBERED_RE = re.compile(rb"^rank (\d+) line (\d+)$")


# ---- the generator -------------------------------------------------------------------------------------

class WorkerPlan:
    """One rank's steps and what it will do on its own (before any teardown reaches it)."""

    def __init__(self, rank):
        self.rank = rank
        self.steps = []
        self.fate = None           # "done", "exit", "signal", "stop", "hang", "ignoreterm"
        self.expected = None       # ("exit", N) or ("signal", S) for fates that fail by themselves
        self.lines = 0             # numbered lines printed before `ready` (checked when ready.R exists)
        self.tail = False          # then "rank R tail" with no newline: ddprun must end it with one
        self.records = False
        self.children = []

    @property
    def fails(self):
        return self.expected is not None and self.expected != ("exit", 0)

    @property
    def ends_by_itself(self):
        return self.fate in ("done", "exit", "signal")

    def describe(self):
        return f"rank {self.rank}: {self.fate} {self.expected or ''} children={self.children} " \
               f"lines={self.lines}{'+tail' if self.tail else ''} records={self.records}"


class RunPlan:
    def __init__(self, seed, index, workers, external=None):
        self.seed = seed
        self.index = index
        self.workers = workers
        # (signal name, seconds, again): sent to ddprun that long after its first worker started (and once
        # more `again` seconds later, unless None), or None.
        self.external = external

    @property
    def nproc(self):
        return len(self.workers)

    def any_failure(self):
        return any(w.fails for w in self.workers)

    def worker_args(self, tmp):
        """test_worker's arguments, every step bound to its rank ("@R:step")."""
        args = []
        for w in self.workers:
            for step in w.steps:
                args.append(f"@{w.rank}:" + step.replace("{tmp}", tmp))
        return args

    def describe(self):
        lines = [w.describe() for w in self.workers]
        if self.external:
            name, delay, again = self.external
            lines.append(f"ddprun gets SIG{name} {delay} s after the first worker started" +
                         (f", and again {again} s later" if again else ""))
        return "\n".join(lines)


def _signal_number(name):
    return int(getattr(signal, "SIG" + name))


def plan_run(seed, index):
    """The run `index` of `seed`: a pure function of both (random.Random seeded with a string is stable)."""
    rng = random.Random(f"ddprun-chaos:{seed}:{index}")
    nproc = rng.randint(2, 4)
    all_done = rng.random() < 0.2  # a share of runs where everyone succeeds: exit 0, stragglers swept
    if all_done:
        fates = ["done"] * nproc
    else:
        fates = rng.choices(["done", "exit", "signal", "stop", "hang", "ignoreterm"], weights=[2, 3, 3, 1, 2, 1],
                            k=nproc)
        if not any(f in ("exit", "signal") for f in fates):
            # Something must end the job: without a failure, a stopped or hanging worker would (rightly)
            # keep ddprun waiting forever.
            fates[rng.randrange(nproc)] = "exit"
    workers = []
    for rank, fate in enumerate(fates):
        w = WorkerPlan(rank)
        w.fate = fate
        if rng.random() < 0.4:
            w.records = True
            w.steps.append("sigrecord={tmp}/signals")
            # termexit: the process lives a little after its first SIGTERM, so a second one would be seen.
            if rng.random() < 0.7:
                w.steps.append(f"termexit={rng.choice([0, 0.1, 0.3, 0.5])}")
        if rng.random() < 0.35:
            for _ in range(rng.randint(1, 2)):
                kind = rng.choice(CHILD_KINDS)
                n = rng.randint(1, 4) if kind == "group" else 1
                w.children.append(f"{kind}:{n}")
                w.steps.append(f"fork={kind}:{n}")
        out = rng.random()
        if out < 0.3:
            w.lines = rng.choice([1, 10, 1000, 20000])
            w.steps.append(f"lines={w.lines}")
            if rng.random() < 0.3:
                w.tail = True
                w.steps.append(f"partial=rank {rank} tail")
            w.steps.append("ready={tmp}")
        elif out < 0.45:
            w.steps.append(f"flood={rng.choice([1000, 100_000, 1_000_000])}")
        delay = round(rng.uniform(0.0, 0.4), 3)
        if delay >= 0.01:
            w.steps.append(f"sleep={delay}")
        if fate == "done":
            w.steps.append("exit=0")
            w.expected = ("exit", 0)
        elif fate == "exit":
            code = rng.randint(1, 255)
            w.steps.append(f"exit={code}")
            w.expected = ("exit", code)
        elif fate == "signal":
            sig = rng.choice(SELF_SIGNALS)
            w.steps.append(f"kill={sig}")
            w.expected = ("signal", _signal_number(sig))
        elif fate == "stop":
            w.steps.append("kill=STOP")  # stays stopped: only the grace period's SIGKILL ends it
        elif fate == "hang":
            w.steps.append("hang")
        elif fate == "ignoreterm":
            w.steps += ["ignore=TERM", "hang"]
        workers.append(w)
    external = None
    if rng.random() < 0.25:
        # A signal from outside while workers run, start or die: a stop (forwarded, teardown with that very
        # signal), a notice (forwarded only; it kills workers that do not handle it, like any USR1 would),
        # or SIGKILL (no teardown at all: what is left must die without ddprun's help).
        name = rng.choice(EXTERNAL_SIGNALS)
        # Half the SIGINTs come twice, a user's second Ctrl-C: SIGKILL at once instead of the grace period.
        again = round(rng.uniform(0.05, 0.3), 3) if name == "INT" and rng.random() < 0.5 else None
        external = (name, round(rng.uniform(0.0, 0.5), 3), again)
    return RunPlan(seed, index, workers, external)


# ---- running one plan -----------------------------------------------------------------------------------

class RunOutcome:
    def __init__(self):
        self.cmd = []
        self.code = None
        self.timed_out = False
        self.elapsed = 0.0
        self.stdout = b""
        self.stderr = b""
        self.events = []
        self.events_error = None
        self.left = []          # pids of processes still alive after ddprun exited
        self.left_info = []
        self.ready = set()      # ranks whose ready file exists
        self.records = []       # (pid, rank, signame)
        self.external_sent = False
        self.hung_info = []
        self.killed = False           # ddprun died of the run's SIGKILL
        self.workers_survived = []    # workers alive 5 s after a SIGKILLed ddprun


def _send_external(proc, events, external, o):
    # After the first "started" event only: a signal before ddprun has its handlers would just kill it
    # (a SIGKILLed-ddprun case the other tests cover), not test the forwarding. Sent only while ddprun has
    # not been reaped (poll() is None), so the pid cannot belong to anything else.
    name, delay, again = external
    # Not wait_until: the signal goes out in any case (or not, once ddprun ended); the checks judge the run.
    deadline = time.monotonic() + RUN_BOUND_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(events) as f:
                if '"started"' in f.read():
                    break
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(_signal_number(name))
        o.external_sent = True
    if again:
        time.sleep(again)
        if proc.poll() is None:
            proc.send_signal(_signal_number(name))


def execute_run(plan, tmp, ddprun, worker, env):
    """Runs ddprun for `plan` with its files in `tmp`; kills whatever is left afterwards (and notes it)."""
    o = RunOutcome()
    events = os.path.join(tmp, "events.jsonl")
    o.cmd = [ddprun, "--nproc-per-node", str(plan.nproc), "--term-timeout", str(TERM_TIMEOUT),
             "--events-file", events, worker, *plan.worker_args(tmp)]
    t0 = time.monotonic()
    proc = subprocess.Popen(o.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    sender = None
    if plan.external:
        # On its own thread: the main one must keep draining ddprun's output meanwhile.
        sender = threading.Thread(target=_send_external, args=(proc, events, plan.external, o), daemon=True)
        sender.start()
    try:
        o.stdout, o.stderr = proc.communicate(timeout=RUN_BOUND_S)
    except subprocess.TimeoutExpired:
        o.timed_out = True
        # What was still there when the bound ran out (ddprun, or something holding its output open).
        o.hung_info = [describe_pid(p) for p in descendants()]
        kill_all([proc.pid] + descendants())
        o.stdout, o.stderr = proc.communicate()
    if sender:
        sender.join()
    o.elapsed = time.monotonic() - t0
    o.code = proc.returncode
    # ddprun has exited and reaped every child it had: as a subreaper it is the parent of anything its
    # workers left, so a live descendant of ours now is a process that outlived it. Looked at at once,
    # with no grace: by design there is nothing to wait for.
    if o.code == -signal.SIGKILL and plan.external and plan.external[0] == "KILL" and not o.timed_out:
        # PR_SET_PDEATHSIG: the workers get SIGKILL when ddprun dies, asynchronously. Not reaped while we
        # wait (pid_alive reads a zombie as dead), so their pids cannot be reused meanwhile.
        o.killed = True
        workers = [e["pid"] for e in read_events(events) if e.get("event") == "started"]
        # Not wait_until: a survivor is recorded for the checks (workers_survived, sweep_leftovers), and both
        # waits share the one bound.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(harness.pid_alive(p) for p in workers):
            time.sleep(0.01)
        o.workers_survived = [describe_pid(p) for p in workers if harness.pid_alive(p)]
        # Whatever holds the job's other processes once ddprun is gone (its job guard) works on its own
        # time too: give it the same bound.
        while time.monotonic() < deadline and descendants():
            reap_zombies()
            time.sleep(0.01)
    o.left, o.left_info = sweep_leftovers()
    try:
        o.events = read_events(events, strict=True)
    except (OSError, ValueError) as e:
        o.events_error = repr(e)
    o.ready = {w.rank for w in plan.workers if os.path.exists(os.path.join(tmp, f"ready.{w.rank}"))}
    try:
        with open(os.path.join(tmp, "signals")) as f:
            for line in f:
                parts = line.split()
                o.records.append((int(parts[0]), int(parts[1]), parts[2]) if len(parts) == 3 else (0, -1, line))
    except FileNotFoundError:
        pass
    return o


# ---- the checks -----------------------------------------------------------------------------------------

def check_run(plan, o, check_once=False, check_sigkilled=False, check_cont=False):
    """Every way this run broke ddprun's contract, as sentences (empty: the run is fine)."""
    problems = []
    if o.timed_out:
        problems.append(f"ddprun did not end within {RUN_BOUND_S:.0f} s (killed); there were: " +
                        "; ".join(o.hung_info))
    if o.killed:
        # No teardown, no summary, output cut short: only who outlived it can be checked.
        if o.workers_survived:
            problems.append("workers outlived a SIGKILLed ddprun by 5 s (PR_SET_PDEATHSIG): " +
                            "; ".join(o.workers_survived))
        if check_sigkilled and o.left:
            problems.append("processes outlived a SIGKILLed ddprun: " + "; ".join(o.left_info))
        return problems
    if o.left:
        problems.append("processes outlived ddprun: " + "; ".join(o.left_info))
    if o.events_error or not o.events:
        problems.append(f"no events file ({o.events_error})")
        return problems
    summary = o.events[-1]
    if summary.get("event") != "summary":
        problems.append(f"last event is not the summary: {summary}")
        return problems
    if summary.get("exit_code") != o.code:
        problems.append(f"ddprun exited {o.code} but the summary says {summary.get('exit_code')}")

    started = {e["rank"]: e for e in o.events if e["event"] == "started"}
    exited = {}
    for e in o.events:
        if e["event"] == "exited":
            if e["rank"] in exited:
                problems.append(f"rank {e['rank']} exited twice: {e}")
            exited[e["rank"]] = e
    if set(started) != set(exited):
        problems.append(f"started ranks {sorted(started)} but exited ranks {sorted(exited)}")
    failed = [e for e in exited.values() if e.get("state") == "failed"]
    plans = {w.rank: w for w in plan.workers}
    if o.code is None or o.code < 0:
        problems.append(f"ddprun itself died of signal {-o.code if o.code else '?'}")

    external = _signal_number(plan.external[0]) if plan.external and o.external_sent else None
    notice = external in (signal.SIGUSR1, signal.SIGUSR2)
    received = [e for e in o.events if e["event"] == "signal"]
    teardown = next((e for e in o.events if e["event"] == "teardown"), None)
    if teardown is None:
        # Nothing stopped the job: every worker must have ended by itself with 0.
        if plan.any_failure():
            problems.append("a worker was to fail, yet no teardown happened")
        if any(e["signal"] not in (signal.SIGUSR1, signal.SIGUSR2) for e in received):
            problems.append(f"ddprun received a stop signal but did not tear down: {received}")
        if o.code != 0:
            problems.append(f"no teardown, yet ddprun exited {o.code}")
        if failed or "root_cause" in summary:
            problems.append(f"no teardown, yet a root cause was named: {summary.get('root_cause')}")
        for rank, e in exited.items():
            if status_of(e) != ("exit", 0):
                problems.append(f"rank {rank} should have exited 0: {e}")
    elif teardown.get("reason") == "signal":
        # Stopped from outside before any worker failed: 128+N, no root cause, every worker a victim.
        sig = teardown.get("signal")
        if external is None or notice or sig != external:
            problems.append(f"teardown by signal {sig}, but the run sent {plan.external} (sent: {o.external_sent})")
        if o.code != 128 + (sig or 0):
            problems.append(f"stopped by signal {sig}, yet ddprun exited {o.code}")
        # The summary may name the stop as a job-level cause (rank -1: "its ddprun received SIGTERM"), never
        # a worker.
        cause = summary.get("root_cause")
        if failed or (cause and cause.get("rank", -1) >= 0):
            problems.append(f"stopped by a signal, yet a worker is the root cause: {failed} {cause}")
    elif teardown.get("reason") == "worker_failed":
        if len(failed) != 1:
            problems.append(f"exactly one worker must be the failed root cause, got {len(failed)}: {failed}")
        cause = summary.get("root_cause")
        if not cause:
            problems.append("a worker failed but the summary names no root cause")
        else:
            rank = cause.get("rank")
            w = plans.get(rank)
            e = exited.get(rank)
            if w is None or e is None:
                problems.append(f"root cause rank {rank} is not a worker that exited: {cause}")
            else:
                status = status_of(e)
                # A teardown starts only at a failure or a stop signal, so the earliest failure is one of
                # the planned ones and failed as planned: nothing had signalled it yet. A forwarded notice
                # (USR1/USR2) kills any worker that does not handle it, which is a failure of its own.
                allowed = ([w.expected] if w.fails else []) + ([("signal", external)] if notice else [])
                if status not in allowed:
                    problems.append(f"root cause rank {rank} ended {status}, expected one of {allowed} "
                                    f"({w.describe()})")
                if o.code != code_of(status):
                    problems.append(f"ddprun exited {o.code}, the root cause (rank {rank}) ended {status}")
                if e.get("state") != "failed":
                    problems.append(f"the root cause's exited event is not 'failed': {e}")
        if o.code == 0:
            problems.append("a worker failed but ddprun exited 0")
    else:
        problems.append(f"teardown for an unknown reason: {teardown}")

    # Bounded teardown: from the teardown (or, with no failure, the last worker's end) to the summary.
    start_ms = next((e["time_ms"] for e in o.events if e["event"] == "teardown"), None)
    if start_ms is None and exited:
        start_ms = max(e["time_ms"] for e in exited.values())
    if start_ms is not None and summary["time_ms"] - start_ms > TEARDOWN_BOUND_S * 1000:
        problems.append(f"teardown took {(summary['time_ms'] - start_ms) / 1000:.1f} s "
                        f"(term-timeout {TERM_TIMEOUT} s)")

    # Output: every line is whole and carries its own rank's prefix; numbered lines are all there.
    numbered = {}
    tails = {}
    for line in o.stdout.splitlines():
        m = LINE_RE.match(line)
        if not m:
            problems.append(f"stdout line without a rank prefix: {line[:120]!r}")
            break
        rank, body = int(m.group(1)), m.group(2)
        if body.startswith(b"rank ") and not body.startswith(b"rank %d " % rank):
            problems.append(f"a line of another rank under rank {rank}'s prefix: {line[:120]!r}")
            break
        n = NUMBERED_RE.match(body)
        if n:
            numbered.setdefault(rank, []).append(int(n.group(2)))
        elif body == b"rank %d tail" % rank:
            tails[rank] = tails.get(rank, 0) + 1
    for w in plan.workers:
        # ready.R is written after the last numbered line was written to ddprun's pipe: from then on,
        # however the rank ends, every line must reach the console.
        if w.lines and w.rank in o.ready:
            got = numbered.get(w.rank, [])
            if got != list(range(w.lines)):
                missing = sorted(set(range(w.lines)) - set(got))
                problems.append(f"rank {w.rank} printed {w.lines} numbered lines, ddprun forwarded {len(got)}"
                                f" (missing {missing[:5]}{'...' if len(missing) > 5 else ''})")
            if w.tail and tails.get(w.rank) != 1:
                problems.append(f"rank {w.rank}'s last line, printed without a newline, was forwarded "
                                f"{tails.get(w.rank, 0)} times (once, ended by a newline, expected)")

    # Signals seen by recording processes: a teardown sends SIGTERM (then SIGKILL), and ddprun forwards the
    # signal it was sent; nothing else.
    allowed_names = {"SIGTERM"} | ({"SIG" + plan.external[0]} if external else set())
    # DESIGN "signals are delivered once": one SIGTERM per process per teardown, one forwarded signal per
    # signal ddprun received. An external SIGTERM that arrives during a worker failure's teardown is
    # forwarded too: that process may see two.
    limit = {name: 1 for name in allowed_names}
    if external == signal.SIGTERM and teardown is not None and teardown.get("reason") == "worker_failed" and \
            any(e["signal"] == signal.SIGTERM for e in received):
        limit["SIGTERM"] = 2
    per_pid = {}
    for pid, rank, name in o.records:
        if name not in allowed_names:
            problems.append(f"pid {pid} (rank {rank}) got {name}; only {sorted(allowed_names)} were sent")
        else:
            per_pid[(pid, name)] = per_pid.get((pid, name), 0) + 1
    if check_once:
        twice = {f"{pid} {name}": n for (pid, name), n in per_pid.items() if n > limit[name]}
        if twice:
            problems.append(f"a signal delivered more than once per process (DESIGN: once): {twice}")

    # At least once: a recording worker that never ends by itself and was SIGKILLed at the end of the grace
    # period had its handler in place when the teardown began (else the teardown's signal would have
    # killed it), so it must have recorded that signal: ddprun signalled every worker. (Only a worker not
    # scheduled at all for the whole 1 s grace period could miss it.)
    if teardown is not None and teardown.get("signal") and not o.killed:
        name = signal.Signals(teardown["signal"]).name
        for w in plan.workers:
            if not w.records or w.fate not in ("hang", "stop") or (w.fate == "stop" and not check_cont):
                continue
            e, st = exited.get(w.rank), started.get(w.rank)
            if not e or not st or status_of(e) != ("signal", signal.SIGKILL):
                continue
            got = {n for pid, _, n in o.records if pid == st["pid"]}
            if name not in got:
                problems.append(f"rank {w.rank} ({w.fate}, pid {st['pid']}) never received the teardown's {name}"
                                f" before its SIGKILL (recorded: {sorted(got)})")
    return problems


def repro(plan, o):
    return (f"seed {plan.seed} run {plan.index}: CHAOS_SEED={plan.seed} CHAOS_ONLY={plan.index} "
            f"python3 -m unittest -v test_chaos\n{plan.describe()}\ncommand: {shlex.join(o.cmd)}")


# ---- the test -------------------------------------------------------------------------------------------

class Chaos(DdprunTestCase):
    def test_random_failures_end_the_job_with_the_root_cause_and_nothing_left(self):
        seed = int(os.environ.get("CHAOS_SEED", DEFAULT_SEED))
        runs = int(os.environ.get("CHAOS_RUNS", DEFAULT_RUNS))
        only = os.environ.get("CHAOS_ONLY")
        check_once = os.environ.get("CHAOS_CHECK_ONCE", "1") != "0"
        check_sigkilled = os.environ.get("CHAOS_CHECK_SIGKILLED", "1") != "0"
        check_cont = os.environ.get("CHAOS_CHECK_CONT", "1") != "0"
        indices = [int(only)] if only is not None else list(range(runs))
        print(f"\nchaos: seed {seed}, {len(indices)} run(s), once-check {'on' if check_once else 'off'}, "
              f"sigkilled-check {'on' if check_sigkilled else 'off'}, cont-check {'on' if check_cont else 'off'} "
              f"(CHAOS_SEED / CHAOS_RUNS / CHAOS_ONLY / CHAOS_CHECK_ONCE / CHAOS_CHECK_SIGKILLED / CHAOS_CHECK_CONT)",
              file=sys.stderr, flush=True)
        limit_core_dumps()
        failures = []
        t0 = time.monotonic()
        for index in indices:
            plan = plan_run(seed, index)
            tmp = tempfile.mkdtemp(prefix=f"run{index}_", dir=self.tmp)
            env = dict(self.env, TMPDIR=tmp)
            o = execute_run(plan, tmp, harness.DDPRUN, harness.WORKER, env)
            problems = check_run(plan, o, check_once, check_sigkilled, check_cont)
            if problems:
                failures.append(f"{repro(plan, o)}\nproblems:\n  " + "\n  ".join(problems) +
                                f"\nddprun exit {o.code} after {o.elapsed:.2f} s\n--- stderr (end)\n"
                                f"{o.stderr[-1500:].decode(errors='replace')}")
                print(failures[-1], file=sys.stderr, flush=True)
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"chaos: {len(indices)} runs in {time.monotonic() - t0:.1f} s, {len(failures)} failed",
              file=sys.stderr, flush=True)
        self.assertEqual(failures, [], f"{len(failures)} of {len(indices)} chaos runs broke the contract "
                                       f"(seed {seed}); each is printed above with its reproduction")

    def test_notices_while_ddprun_exits_do_not_change_its_exit_code(self):
        # SLURM may send its notice to every process of the step at any time, ddprun's last instant included.
        # Workers ignore SIGUSR1; rank 1 fails with 3; ddprun gets a SIGUSR1 every millisecond until it is gone.
        limit_core_dumps()
        bad = []
        for i in range(40):
            proc = self.start("-q", "--nproc-per-node", 2, harness.WORKER, "ignore=USR1", f"ready={self.tmp}",
                              "@1:sleep=0.05", "@1:exit=3", "@0:exit=0")
            self.wait_for_files([self.path("ready.0"), self.path("ready.1")])  # both ignore SIGUSR1 by now
            while proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGUSR1)
                except ProcessLookupError:
                    pass
                time.sleep(0.001)
            proc.communicate()
            if proc.returncode != 3:
                bad.append((i, proc.returncode))
            for r in (0, 1):
                if os.path.exists(self.path(f"ready.{r}")):
                    os.remove(self.path(f"ready.{r}"))
        self.assertEqual(bad, [], "(run, ddprun's exit status) where it was not the root cause's 3")

    def test_a_process_leaving_its_group_during_teardown_gets_one_sigterm(self):
        # Rank 0 keeps starting setsid children (each records its signals, ignoring them) while rank 1 fails.
        twice = []
        for i in range(15):
            record = self.path(f"signals.{i}")
            # Rank 1 fails once rank 0 records (its file exists): loaded, rank 1 could fail before rank 0 ran at all,
            # and there was no record to read (seen once beside a full ctest -j2).
            r = self.worker(f"@0:sigrecord={record}", "@0:fork=setsid:40", "@0:hang", f"@1:waitfile={record}",
                            "@1:sleep=0.005", "@1:exit=1", extra=("-q", "--term-timeout", "0.5"))
            self.assertEqual(r.code, 1, r)
            counts = {}
            with open(record) as f:
                for line in f:
                    pid, _, name = line.split()
                    if name == "SIGTERM":
                        counts[pid] = counts.get(pid, 0) + 1
            twice += [(i, pid, n) for pid, n in counts.items() if n > 1]
        self.assertEqual(twice, [], "(run, pid, SIGTERMs received) for processes signalled more than once")


if __name__ == "__main__":
    unittest.main()
