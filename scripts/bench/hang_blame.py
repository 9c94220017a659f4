#!/usr/bin/python3
"""Does --hang-timeout blame the right rank? (README "Hang detection"); python3 stdlib only.

  hang_blame.py [--runs N] [--seed S] [--skew [FAST:SLOW]] [--first other|guilty] [--build DIR]
               [--scenarios a,b] [--random-order] [--step K] [--timeout SEC] [--after-beat] [--readme]
               [--keep DIR] [--run-timeout SEC]

Each run is a real job on loopback: two ddprun processes (--nnodes 2, --node-rank 0 and 1, --master-addr
127.0.0.1, a free --rdzv-port), 2 ranks each, 4 gloo ranks in all under Debian's /usr/bin/python3 (python3-torch).
Every step is beat(step), an all_reduce of a 1-element tensor and a 50 ms sleep; at step K (--step, default 6)
the guilty rank, drawn at random among 0-3 (--seed: the same draws every time), does one of:

  straggler  stuck in stuck_in_loader() (time.sleep) before beating K; the others beat K, wait in K's all_reduce
  loop       spins in a busy Python loop (spin_forever(), no beats) before beating K
  deadlock   takes a threading.Lock twice (take_lock_twice()) before beating K
  uneven     has fewer batches: leaves the loop after step K-1 and calls dist.barrier() (out_of_data()); the
             others beat K and wait in K's all_reduce. It is *ahead* in the program, at the smaller step.
  skip       beats K, skips K's all_reduce and calls dist.barrier() (skipped_all_reduce()): every rank is at
             step K, so the step rule cannot decide.

(--after-beat moves the stop of straggler/loop/deadlock after K's beat: every rank at step K as well.)

--readme: the README's loop instead (issue 32): DistributedDataParallel over nn.Linear(8, 8), each step a forward,
backward (DDP's gradient all-reduce), opt.step() and *then* beat(step). The guilty rank goes wrong before K's
forward (straggler, loop, deadlock) or runs out of data after K-1 (uneven: dist.barrier()); the others wait inside
DDP's backward, which has no distributed_c10d frame. (skip has no meaning there.)

Scenarios go round-robin (--random-order: drawn). Both nodes get --hang-timeout (--timeout, default 2); --skew
gives one node the shorter one (default 1.5 against 4), so that it notices first: --first other (the default) the
node that does NOT hold the guilty rank, so that the verdict has to come from the other node's beats; --first
guilty the culprit's own node.

A root cause that says "could not tell which one holds the others" is counted apart: honest, not right.

Recorded per run: the rank in each node's "root cause: rank N" line (both must agree for "right"), both exit codes
(78 expected), the wall time from the first start to both ddprun processes gone, whether every node's stack file
(the "stacks in host:path, host:path at TIME" list) exists and together they hold "## rank R" for all 4 ranks, and
whether the guilty rank's section names the scenario's function ("evidence"). ddprun is copied to a private
directory first, so that a rebuild during the benchmark cannot change it. Each run has its own TMPDIR (ddprun's
run directories land there), removed afterwards; the benchmark is a child subreaper and SIGKILLs anything of a
run that is left (a run past --run-timeout is killed as a whole and counted as a timeout).
"""
import argparse, os, random, re, shutil, signal, statistics, subprocess, sys, tempfile, textwrap, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from harness import descendants, reap_zombies  # noqa: E402  (importing it makes this process a subreaper)
from ports import free_port  # noqa: E402

PYTHON = "/usr/bin/python3"
PYTHON_DIR = os.path.abspath(os.path.join(ROOT, "python"))
HUNG = 78
NNODES, NPROC = 2, 2
WORLD = NNODES * NPROC
SCENARIOS = ["straggler", "loop", "deadlock", "uneven", "skip"]
README_SCENARIOS = ["straggler", "loop", "deadlock", "uneven"]
# The function each scenario's guilty rank is in once stuck: its stack should show it ("evidence").
MARKER = {"straggler": "stuck_in_loader", "loop": "spin_forever", "deadlock": "take_lock_twice",
          "uneven": "out_of_data", "skip": "skipped_all_reduce"}

# What both loops share: the set-up and the ways the guilty rank goes wrong (each in a function of its own, so that
# its stack names it: MARKER). The loops follow: the bench's own (beat, then an explicit all_reduce) and the README's.
COMMON = """
    import os, threading, time, torch, torch.distributed as dist, ddprun_heartbeat
    scenario, guilty = os.environ["BLAME_SCENARIO"], int(os.environ["BLAME_GUILTY"])
    K, after_beat = int(os.environ["BLAME_STEP"]), os.environ["BLAME_AFTER_BEAT"] == "1"
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def stuck_in_loader():
        time.sleep(600)

    def spin_forever():
        n = 0
        while True:
            n += 1

    def take_lock_twice():
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()

    def out_of_data():
        dist.barrier()

    def skipped_all_reduce():
        dist.barrier()

    STOP = {"straggler": stuck_in_loader, "loop": spin_forever, "deadlock": take_lock_twice}
"""

SCRIPT = COMMON + """
    t = torch.ones(1)
    for step in range(1, 1000):
        me = rank == guilty and step == K
        if me and scenario == "uneven":
            break                          # fewer batches: the loop ends after step K-1
        if me and scenario in STOP and not after_beat:
            STOP[scenario]()
        ddprun_heartbeat.beat(step)
        if me and scenario in STOP:
            STOP[scenario]()
        if me and scenario == "skip":
            skipped_all_reduce()
            break
        dist.all_reduce(t)
        time.sleep(0.05)
    if scenario == "uneven" and rank == guilty:
        out_of_data()
    time.sleep(600)                        # not reached by a rank that waits for the guilty one
"""

README_SCRIPT = COMMON + """
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 1000):
        me = rank == guilty and step == K
        if me and scenario == "uneven":
            break                          # fewer batches: the loop ends after step K-1
        if me:
            STOP[scenario]()               # before the forward
        loss = model(torch.randn(4, 8)).sum()
        opt.zero_grad()
        loss.backward()                    # DDP's all-reduce of the gradients
        opt.step()
        ddprun_heartbeat.beat(step)        # the README's placement: at the end of the step
        time.sleep(0.05)
    if scenario == "uneven" and rank == guilty:
        out_of_data()
    time.sleep(600)
"""

# ddprun's own last word (its summary); the rendezvous' log lines before it say the same on the hosting node.
ROOT_CAUSE = re.compile(r"^ddprun: root cause: rank (\d+) \(([^)]*)\) (\w+).*$", re.M)
UNSURE = re.compile(r"^ddprun: root cause: the job hung: .*could not tell which one holds the others.*$", re.M)
STACKS = re.compile(r"stacks in (.+?) at \d{4}-\d\d-\d\dT")


def clean_up(grace=5.0):
    """Waits up to `grace` s for whatever a run left to go, then SIGKILLs it, by pid. Returns how many were left."""
    deadline = time.monotonic() + grace
    reap_zombies()
    left = descendants()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        reap_zombies()
        left = descendants()
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reap_zombies()
    return len(left)


def one_run(ddprun, index, scenario, guilty, a):
    tmp = tempfile.mkdtemp(prefix="ddprun-blame.")
    procs = []
    try:
        script = os.path.join(tmp, "job.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(README_SCRIPT if a.readme else SCRIPT))
        env = dict(os.environ, TMPDIR=tmp, DDPRUN_TOKEN="test-token", PYTHON_EXEC=PYTHON, GLOO_SOCKET_IFNAME="lo",
                   PYTHONPATH=":".join(p for p in (PYTHON_DIR, os.environ.get("PYTHONPATH", "")) if p),
                   BLAME_SCENARIO=scenario, BLAME_GUILTY=str(guilty), BLAME_STEP=str(a.step),
                   BLAME_AFTER_BEAT="1" if a.after_beat else "0", OMP_NUM_THREADS="1")
        env.pop("DDPRUN_LOG_LEVEL", None)
        guilty_node = guilty // NPROC
        if a.skew:
            fast, slow = a.skew.split(":")
            first = (lambda n: n != guilty_node) if a.first == "other" else (lambda n: n == guilty_node)
            timeouts = [fast if first(n) else slow for n in range(NNODES)]
        else:
            timeouts = [f"{a.timeout:g}"] * NNODES
        port = free_port()
        logs = []
        t0 = time.monotonic()
        for n in range(NNODES):
            err = open(os.path.join(tmp, f"node{n}.err"), "wb+")
            out = open(os.path.join(tmp, f"node{n}.out"), "wb+")
            logs.append((out, err))
            procs.append(subprocess.Popen(
                [ddprun, "--nnodes", str(NNODES), "--node-rank", str(n), "--master-addr", "127.0.0.1",
                 "--rdzv-port", str(port), "--nproc-per-node", str(NPROC), "--rdzv-timeout", "120",
                 "--hang-timeout", timeouts[n], script],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True))
        ends = [None] * NNODES
        timed_out = False
        while None in ends:
            for i, p in enumerate(procs):
                if ends[i] is None and p.poll() is not None:
                    ends[i] = time.monotonic()
            if None in ends and time.monotonic() - t0 > a.run_timeout:
                timed_out = True
                for i, p in enumerate(procs):
                    if ends[i] is None:
                        try:
                            os.killpg(p.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                        p.wait()
                        ends[i] = time.monotonic()
            time.sleep(0.02)
        wall = max(ends) - t0
        left = clean_up()
        rcs = [p.returncode for p in procs]
        named, reasons, files, evidence_lines = [], [], [], []
        for out, err in logs:
            out.close()
            err.seek(0)
            text = err.read().decode(errors="replace")
            err.close()
            m = ROOT_CAUSE.search(text)
            unsure = UNSURE.search(text)
            named.append(int(m.group(1)) if m else "?" if unsure else None)
            reasons.append(m.group(3) if m else "unsure" if unsure else None)
            line = m.group(0) if m else unsure.group(0) if unsure else ""
            evidence_lines.append(line)
            s = STACKS.search(line)
            files.append([e.split(":", 1)[1] if ":" in e else e for e in s.group(1).split(", ")] if s else [])
        # The stack files: every node's, as listed (both nodes list the same ones), read from this machine.
        listed = sorted({f for fs in files for f in fs})
        stacks, exist = "", len(listed) == NNODES and all(len(fs) == NNODES for fs in files)
        for path in listed:
            try:
                with open(path, errors="replace") as f:
                    stacks += f.read()
            except OSError:
                exist = False
        complete = exist and all(re.search(rf"^## rank {r}\b", stacks, re.M) for r in range(WORLD))
        # The guilty rank's sections (native stacks, then its Python stacks), up to the next rank's or a header.
        sections = re.findall(rf"^## rank {guilty}\b.*?(?=^## |^# |\Z)", stacks, re.S | re.M)
        evidence = any(MARKER[scenario] in sec for sec in sections)
        agree = named[0] is not None and len(set(named)) == 1
        with open(os.path.join(tmp, "node0.err"), errors="replace") as f:  # node 0 hosts the rendezvous
            first = re.search(r"node (\d+) \(host \S+\) found a hung worker", f.read())
        noticed = first.group(1) if first else "?"
        if a.keep and not (agree and named[0] == guilty and complete and evidence):
            dest = os.path.join(a.keep, f"run{index}-{scenario}-guilty{guilty}")
            os.makedirs(dest, exist_ok=True)
            for n in range(NNODES):
                for kind in ("err", "out"):
                    shutil.copy(os.path.join(tmp, f"node{n}.{kind}"), dest)
            for k, path in enumerate(listed):
                if os.path.exists(path):
                    shutil.copy(path, os.path.join(dest, f"hang_stacks.{k}.txt"))
        return dict(scenario=scenario, guilty=guilty, named=named, reasons=reasons, rcs=rcs, wall=wall,
                    right=agree and named[0] == guilty, unsure=agree and named[0] == "?", agree=agree, complete=complete, evidence=evidence,
                    timed_out=timed_out, left=left, noticed=noticed, line=evidence_lines[0] or evidence_lines[-1],
                    timeouts=timeouts)
    finally:  # also on an exception or Ctrl-C (ddprun is in its own session: the terminal's SIGINT missed it)
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        clean_up(grace=0)
        shutil.rmtree(tmp, ignore_errors=True)


def detail(line):
    """The verdict's evidence from the root cause line: the silence and the steps, without paths and times."""
    why = re.search(r"\) \w+: (.*?)(?: \(last beat at [^)]*\))?; killed with \w+(?:; (?!stacks in)(.*?))?(?:; stacks in|$)", line)
    return "; ".join(g for g in why.groups() if g) if why else line[:200]


def main():
    ap = argparse.ArgumentParser(description="How often --hang-timeout names the guilty rank (2 nodes x 2 gloo ranks).")
    ap.add_argument("--runs", type=int, default=35)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skew", nargs="?", const="1.5:4", default=None, metavar="FAST:SLOW",
                    help="--hang-timeout FAST on the node without the guilty rank, SLOW on its node (default 1.5:4)")
    ap.add_argument("--timeout", type=float, default=2.0, help="--hang-timeout on both nodes without --skew")
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--first", choices=("other", "guilty"), default="other",
                    help="with --skew: which node notices first, the one without the guilty rank or its own")
    ap.add_argument("--readme", action="store_true", help="the README's DDP loop, beat after opt.step()")
    ap.add_argument("--scenarios", default=None, help="comma list among " + ",".join(SCENARIOS))
    ap.add_argument("--random-order", action="store_true", help="draw the scenario of each run (default: round-robin)")
    ap.add_argument("--step", type=int, default=6, help="K, the step at which the guilty rank goes wrong")
    ap.add_argument("--after-beat", action="store_true", help="straggler/loop/deadlock stop after K's beat")
    ap.add_argument("--keep", metavar="DIR", help="copy the logs and stack files of every run not all right here")
    ap.add_argument("--run-timeout", type=float, default=150.0, help="a run past this is killed (counted: timeout)")
    a = ap.parse_args()
    known = README_SCENARIOS if a.readme else SCENARIOS
    scenarios = a.scenarios.split(",") if a.scenarios else known
    for s in scenarios:
        if s not in known:
            ap.error(f"unknown scenario {s!r}")
    if a.skew and not re.fullmatch(r"[\d.]+:[\d.]+", a.skew):
        ap.error("--skew FAST:SLOW, e.g. 1.5:4")
    if os.system(f"{PYTHON} -c 'import torch.distributed' 2>/dev/null") != 0:
        sys.exit(f"{PYTHON} has no torch (Debian python3-torch)")
    rng = random.Random(a.seed)
    bindir = tempfile.mkdtemp(prefix="ddprun-blame-bin.")
    results = []
    try:
        ddprun = os.path.join(bindir, "ddprun")
        shutil.copy2(os.path.join(a.build, "launcher", "ddprun"), ddprun)
        where = "without the guilty rank" if a.first == "other" else "of the guilty rank"
        timeouts = f"skew {a.skew} (fast on the node {where})" if a.skew else f"{a.timeout:g} s"
        print(f"hang_blame: {a.runs} runs, seed {a.seed}, 2 nodes x 2 gloo ranks, K={a.step}, --hang-timeout "
              f"{timeouts}{', stop after the beat' if a.after_beat else ''}"
              f"{', the README DDP loop (beat after opt.step)' if a.readme else ''}", flush=True)
        for i in range(a.runs):
            scenario = rng.choice(scenarios) if a.random_order else scenarios[i % len(scenarios)]
            guilty = rng.randrange(WORLD)
            r = one_run(ddprun, i, scenario, guilty, a)
            results.append(r)
            named = "/".join("-" if n is None else str(n) for n in r["named"])
            print(f"run {i:2d} {scenario:9s} guilty {guilty} (node {guilty // NPROC}, timeouts "
                  f"{'/'.join(r['timeouts'])}, noticed by node {r['noticed']}): named {named} {'RIGHT' if r['right'] else 'COULD NOT TELL' if r['unsure'] else 'WRONG'}"
                  f" ({'/'.join(str(x) for x in r['reasons'])}), rc {'/'.join(str(c) for c in r['rcs'])}, "
                  f"{r['wall']:.1f} s, stacks {'complete' if r['complete'] else 'INCOMPLETE'}, "
                  f"evidence {'yes' if r['evidence'] else 'no'}"
                  f"{', TIMEOUT' if r['timed_out'] else ''}{', %d processes left, killed' % r['left'] if r['left'] else ''}"
                  f" | {detail(r['line'])}", flush=True)
    finally:
        shutil.rmtree(bindir, ignore_errors=True)
    print()
    print(f"{'scenario':10s} {'named right':>12s} {'unsure':>7s} {'agree':>7s} {'rc 78':>7s} {'stacks complete':>16s} "
          f"{'evidence':>9s} {'median s':>9s}  wrong: guilty->named")
    for s in scenarios + ["all"]:
        rows = [r for r in results if s in ("all", r["scenario"])]
        if not rows:
            continue
        n = len(rows)
        wrong = ", ".join(f"{r['guilty']}->{'/'.join('-' if x is None else str(x) for x in r['named'])}"
                          for r in rows if not r["right"] and not r["unsure"])
        print(f"{s:10s} {sum(r['right'] for r in rows):>7d} / {n:<2d} {sum(r['unsure'] for r in rows):>4d}/{n:<2d} "
              f"{sum(r['agree'] for r in rows):>4d}/{n:<2d} "
              f"{sum(all(c == HUNG for c in r['rcs']) for r in rows):>4d}/{n:<2d} "
              f"{sum(r['complete'] for r in rows):>11d} / {n:<2d} {sum(r['evidence'] for r in rows):>6d}/{n:<2d} "
              f"{statistics.median(r['wall'] for r in rows):>9.1f}  {wrong}")


if __name__ == "__main__":
    main()
