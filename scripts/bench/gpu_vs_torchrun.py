#!/usr/bin/env python3
"""ddprun against the machine's own torchrun, side by side in one run (issue 35), for a GPU machine with PyTorch 2.x.

Each scenario runs --runs times per launcher, the launchers interleaved run by run; the table gives median and
min–max, each run's exit codes, and the processes left behind (this script is a child subreaper through
tests/support/harness.py: whatever a launcher leaves is re-parented here, counted 3 s after the launchers
exited, then killed). Workers are scripts/bench/gpu_vs_torchrun_worker.py; each writes its pid at start, so the
time every process is gone is the last exit seen on pidfds of the launchers and workers, plus a /proc scan for any
other descendant.
 1. launch: 8 x /bin/true; floor: the same 8 processes started by `xargs -P 8`.
 2. rank exit: 8 workers, rank 1 exits 3 once all are up, the others sleep: exit -> launcher exited, -> all gone.
 3. exception in DDP: a tiny model on gloo (4 ranks on the CPU, rank 2 raises at step 50) and on NCCL (a rank per
    GPU, rank min(2, world-1) raises at step 50): the raise -> launcher exited and every process gone.
 4. two agents on loopback, 2 ranks each in a Python loop outside any collective; rank 3 exits 1: exit -> both
    launchers exited and every process gone. A launcher still running --cap s after the exit is recorded so and
    killed (torchrun's agents wait in their exit barrier).
 5. NCCL DDP, 200 steps, a rank per GPU: wall time of the launch.

  scripts/bench/gpu_vs_torchrun.py --out DIR [--runs 3] [--cap 5] [--budget 225] [--only SCENARIO,...]
                                   [--ddprun PATH] [--python PY] [--torchrun 'CMD ...']
  scripts/bench/gpu_vs_torchrun.py --dry-run --out DIR   (any machine; ctest's bench.gpu_vs_torchrun_dry_run)

--budget: a scenario is not run again once its next run would end past SEC s from the start (its first run always
happens); the header names each scenario so cut. --dry-run: 1 run each, NCCL rows with 20 steps (and only where a
GPU is, as always), 60 s per run at most.
--ddprun: default build/launcher/ddprun, else build-gpu-deps/launch/ddprun (scripts/gpu_launch_check.sh --pack; the
libraries beside it go on LD_LIBRARY_PATH). --python: the interpreter with torch (default: this one, else
/usr/bin/python3); the workers run on it. torchrun: `PY -m torch.distributed.run`; for torch 1.x on Python >= 3.11,
torchrun311.py from the peers' folder ($DDPRUN_PEERS, else ../shared/peers beside the checkout). torch 1.x's runs at
--monitor_interval 0.1 (2.x's default) and, for one node, on a free port (its --standalone always takes 29400).
DIR/gpu_vs_torchrun.md (the table) and DIR/gpu_vs_torchrun.json (every run's figures, exit codes, the launchers'
last lines) are written after each scenario. Exit status: 0 when every row has its figures, every exit code is the
expected one (0 for a launch or a training; the failing rank's for ddprun; non-zero for torchrun, or still running
at the cap in scenario 4) and nothing was left behind; 1 otherwise; 77 (skipped) without torch or its torchrun.
"""
import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from gpu_vs_torchrun_jobs import Job

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
WORKER = os.path.join(HERE, "gpu_vs_torchrun_worker.py")
PROBE = ("import sys, torch\nn = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
         "print(torch.__version__, n, sys.version_info >= (3, 11))\nprint(torch.cuda.get_device_name(0) if n else '')")


def skip(why):
    print(f"gpu_vs_torchrun: skipped: {why}")
    sys.exit(77)


def find_ddprun(path):
    for candidate in [path] if path else ["build/launcher/ddprun", "build-gpu-deps/launch/ddprun"]:
        full = os.path.abspath(os.path.join(ROOT, candidate))
        if os.access(full, os.X_OK):
            return full
    sys.exit(f"gpu_vs_torchrun: no ddprun ({path or 'build/launcher/ddprun, build-gpu-deps/launch/ddprun'})")


def find_torch(python):
    """(python, torch version, GPU count, whether Python >= 3.11, GPU name) of the first interpreter with torch."""
    for py in [python] if python else list(dict.fromkeys([sys.executable, "/usr/bin/python3"])):
        try:
            probe = subprocess.run([py, "-c", PROBE], capture_output=True, text=True)
        except OSError:
            continue
        if probe.returncode == 0:
            lines = probe.stdout.splitlines() + [""]
            version, gpus, py311 = lines[0].split()
            return py, version, int(gpus), py311 == "True", lines[1]
    skip(f"no Python with torch ({python or sys.executable + ', /usr/bin/python3'}): no torchrun to compare with")


def find_torchrun(given, py, version, py311):
    """torchrun's command line, up to its options."""
    if given:
        return shlex.split(given)
    if version.split(".")[0] != "1" or not py311:
        return [py, "-m", "torch.distributed.run"]
    peers = os.environ.get("DDPRUN_PEERS", os.path.join(ROOT, "../shared/peers"))
    peer = os.path.join(peers, "torchrun311.py")
    if not os.path.exists(peer):
        skip(f"torch {version}'s torchrun on Python >= 3.11 needs {peer} (set DDPRUN_PEERS=DIR)")
    return [py, peer]


def machine(py_info):
    py, version, gpus, _, name = py_info
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
        names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
        name = f"{len(names)} x {names[0]}" if names else name
    elif gpus:
        name = f"{gpus} x {name}"
    return {"host": os.uname().nodename, "cores": os.cpu_count(), "gpu": name or "no GPU", "gpus": gpus,
            "torch": version, "python": py, "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average": list(os.getloadavg())}


class Bench:
    def __init__(self, args):
        self.args = args
        self.ddprun = find_ddprun(args.ddprun)
        self.py_info = find_torch(args.python)
        py, version, self.gpus, py311, _ = self.py_info
        self.torchrun = find_torchrun(args.torchrun, py, version, py311)
        self.v1 = version.split(".")[0] == "1" and not args.torchrun
        self.torchrun_label = f"torchrun of torch {version}: `{' '.join(self.torchrun)}`" + \
            (" at --monitor_interval 0.1 (2.x's default)" if self.v1 else "")
        self.tmp = tempfile.mkdtemp(prefix="ddprun_gpu_vs_torchrun.")
        self.env = dict(os.environ, TMPDIR=self.tmp, PYTHON_EXEC=py, DDPRUN_TOKEN="gpu-vs-torchrun")
        here = os.path.dirname(self.ddprun)
        if any(f.startswith("lib") and ".so" in f for f in os.listdir(here)):  # the packed binary's libraries
            self.env["LD_LIBRARY_PATH"] = here + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")
        self.results, self.cut = {}, {}
        self.t0 = time.monotonic()

    def ddprun_cmd(self, nproc, *program, node=None, port=None):
        where = ["--standalone"] if node is None else ["--nnodes", "2", "--node-rank", str(node),
                                                       "--master-addr", "127.0.0.1", "--rdzv-port", str(port)]
        return [self.ddprun, "-q", "--nproc-per-node", str(nproc)] + where + list(program)

    def torchrun_cmd(self, nproc, *program, node=None, port=None):
        cmd = self.torchrun + ["--nproc_per_node", str(nproc)] + (["--monitor_interval", "0.1"] if self.v1 else [])
        if node is not None:
            cmd += ["--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
                    "--rdzv_id", f"bench{port}", "--rdzv_conf", f"is_host={'true' if node == 0 else 'false'}"]
        elif self.v1:  # 1.x's --standalone always takes port 29400, which another job here may hold
            cmd += ["--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{Job.free_port()}",
                    "--rdzv_id", "bench"]
        else:
            cmd += ["--standalone"]
        return cmd + list(program)

    def rounds(self, scenario):
        """Run numbers; past --budget s, a scenario's first run only (the row keeps a figure, the cut is noted)."""
        last = 0.0
        for i in range(self.args.runs):
            if i and self.args.budget and time.monotonic() - self.t0 + last > self.args.budget:
                self.cut[scenario] = i
                return
            began = time.monotonic()
            yield i
            last = time.monotonic() - began

    def run(self, scenario, who, cmds, timeout, **kw):
        timeout = min(timeout, 60) if self.args.dry_run else timeout  # inside ctest's own limit
        s = Job(cmds, self.env, self.tmp, timeout, **kw).summary()
        self.results.setdefault(scenario, {}).setdefault(who, []).append(s)
        print(f"[{time.monotonic() - self.t0:6.1f} s] {scenario:10s} {who:8s} exit codes {s['rcs']}, wall "
              f"{s['wall_ms']} ms, failure -> all gone {s['gone_ms']} ms, left {s['left']}", file=sys.stderr,
              flush=True)

    def launch(self):
        true8 = os.path.join(self.tmp, "eight_lines")
        with open(true8, "w") as f:
            f.write("x\n" * 8)
        for _ in self.rounds("launch"):
            self.run("launch", "floor", [["xargs", "-P", "8", "-n", "1", "/bin/true"]], stdin=true8, timeout=30)
            self.run("launch", "ddprun", [self.ddprun_cmd(8, "/bin/true")], timeout=30)
            self.run("launch", "torchrun", [self.torchrun_cmd(8, "--no_python", "/bin/true")], timeout=120)

    def both(self, scenario):
        """(launcher, its command line maker) for each run of `scenario`: ddprun, then torchrun."""
        for _ in self.rounds(scenario):
            yield from (("ddprun", self.ddprun_cmd), ("torchrun", self.torchrun_cmd))

    def rank_exit(self):
        for who, make in self.both("rank_exit"):
            self.run("rank_exit", who, [make(8, WORKER, "exit", "{dir}", "1", "3", "sleep")], timeout=120)

    def ddp_exception(self, backend):
        world, fail = (4, 2) if backend == "gloo" else (self.gpus, min(2, self.gpus - 1))
        for who, make in self.both(f"{backend}_raise"):  # steps without end: rank `fail` raises at step 50
            program = [WORKER, "ddp", "{dir}", backend, "1000000", str(fail), "50"]
            self.run(f"{backend}_raise", who, [make(world, *program)], timeout=240)

    def two_nodes(self):
        for who, make in self.both("two_nodes"):
            port = Job.free_port()
            cmds = [make(2, WORKER, "exit", "{dir}", "3", "1", "busy", node=n, port=port) for n in (0, 1)]
            self.run("two_nodes", who, cmds, timeout=120, cap=self.args.cap)

    def nccl_wall(self):
        for who, make in self.both("nccl_wall"):
            program = [WORKER, "ddp", "{dir}", "nccl", str(self.args.steps), "-1", "-1"]
            self.run("nccl_wall", who, [make(self.gpus, *program)], timeout=300)


SCENARIOS = ["launch", "rank_exit", "gloo_raise", "nccl_raise", "two_nodes", "nccl_wall"]
# The table's rows: (scenario, title, figure, unit). Timed from the failure's stamp: "-> gone" is every launcher
# and every process it started gone, "-> exited" the launcher(s) alone.
ROWS = [
    ("launch", "1. launch 8 x /bin/true", "wall_ms", "ms"),
    ("rank_exit", "2. rank 1 of 8 exits 3 -> gone", "gone_ms", "ms"),
    ("rank_exit", "2. rank 1 of 8 exits 3 -> launcher exited", "exit_ms", "ms"),
    ("gloo_raise", "3. gloo DDP, 4 ranks, rank 2 raises -> gone", "gone_ms", "ms"),
    ("nccl_raise", "3. NCCL DDP, a rank per GPU, one raises -> gone", "gone_ms", "ms"),
    ("two_nodes", "4. 2 agents x 2 ranks, rank 3 exits 1 -> gone", "gone_ms", "ms"),
    ("nccl_wall", "5. NCCL DDP, {steps} steps: wall", "wall_ms", "s"),
]
# Expected exit codes (ddprun, torchrun) and the figure every run must have.
EXPECT = {"launch": (0, 0, "wall_ms"), "rank_exit": (3, "nonzero", "gone_ms"), "gloo_raise": (1, "nonzero", "gone_ms"),
          "nccl_raise": (1, "nonzero", "gone_ms"), "two_nodes": (1, "nonzero|running", "gone_ms"),
          "nccl_wall": (0, 0, "wall_ms")}


def spread(values, unit):
    """'median unit (min–max)' of the figures, or None when there are none."""
    if not values:
        return None
    if unit == "s":
        values, fmt = [v / 1000 for v in values], "{:.2f}".format
    else:
        fmt = lambda v: f"{v:.1f}" if v < 100 else f"{v:.0f}"  # noqa: E731
    text = f"{fmt(statistics.median(values))} {unit}"
    return text + (f" ({fmt(min(values))}–{fmt(max(values))})" if len(values) > 1 else "")


def as_expected(rc, want):
    if isinstance(want, int):
        return rc == want
    return rc != 0 and (rc != "running" or want == "nonzero|running")


def problems_of(results):
    found = []
    for scenario, (want_d, want_t, key) in EXPECT.items():
        for who, want in (("floor", 0), ("ddprun", want_d), ("torchrun", want_t)):
            for i, r in enumerate(results.get(scenario, {}).get(who, [])):
                if any(not as_expected(rc, want) for rc in r["rcs"]) or r["left"] or (r[key] is None and
                                                                                    not r["capped"]):
                    found.append(f"{scenario} {who} run {i + 1}: exit codes {r['rcs']} (want {want}), {key} "
                                 f"{r[key]}, left behind {r['left']}; the launchers' last lines:\n{r['log_tail']}")
    return found


def cell(runs, key, unit, cap):
    text = spread([r[key] for r in runs if r[key] is not None], unit)
    capped = [r for r in runs if r["capped"]]
    if capped:
        alive = statistics.median(r["alive_at_kill"] for r in capped)
        text = (text + "; " if text else "") + (f"still running {cap:g} s after the exit in {len(capped)} of "
                                                f"{len(runs)} runs ({alive:g} processes), killed")
    return text or "none"


def header(bench, m):
    load = " ".join(f"{x:.2f}" for x in m["load_average"])
    cut = "".join(f" Cut by --budget {bench.args.budget:g} s: {k} after {n} runs." for k, n in bench.cut.items())
    return (f"**{m['host']}**: {m['cores']} cores, GPU: {m['gpu']}, torch {m['torch']} ({m['python']}), "
            f"{m['date_utc']}, load average {load}. ddprun `{bench.ddprun}`; {bench.torchrun_label}. "
            f"Runs: {bench.args.runs} per launcher, interleaved; median (min–max); --cap {bench.args.cap:g} s.{cut}")


def joined(runs, what):
    return "  ".join(what(r) for r in runs)


def table(bench):
    m = machine(bench.py_info)
    lines = [header(bench, m), "", "| scenario | ddprun | torchrun | torchrun / ddprun | exit codes: ddprun; "
             "torchrun | left behind: ddprun; torchrun |", "|---|---|---|---|---|---|"]
    cap = bench.args.cap
    for scenario, title, key, unit in ROWS:
        title, got = title.format(steps=bench.args.steps), bench.results.get(scenario)
        if got is None:
            why = "no GPU" if scenario.startswith("nccl") and bench.gpus == 0 else "not run"
            lines.append(f"| {title} | skipped: {why} | skipped: {why} | | | |")
            continue
        ddp, tr = got.get("ddprun", []), got.get("torchrun", [])
        meds = [statistics.median(v) if v else None for v in ([r[key] for r in x if r[key] is not None]
                                                               for x in (ddp, tr))]
        ratio = f"{meds[1] / meds[0]:.1f}x" if meds[0] and meds[1] else "—"
        row = f"| {title} | {cell(ddp, key, unit, cap)} | {cell(tr, key, unit, cap)} | {ratio} |"
        if key == EXPECT[scenario][2]:  # not a second row of the same runs
            rcs = lambda r: "+".join(map(str, r["rcs"]))  # noqa: E731
            row += (f" {joined(ddp, rcs)}; {joined(tr, rcs)} | {joined(ddp, lambda r: str(r['left']))}; "
                    f"{joined(tr, lambda r: str(r['left']))} |")
        else:
            row += " | |"
        lines.append(row)
        floor = got.get("floor")
        if floor:
            walls = [r["wall_ms"] for r in floor]
            ratio = f"{meds[0] / statistics.median(walls):.2f}x" if meds[0] else "—"
            codes, left = joined(floor, lambda r: str(r["rcs"][0])), joined(floor, lambda r: str(r["left"]))
            lines.append(f"| 1. floor: the same 8 by `xargs -P 8`; ddprun / floor {ratio} | {spread(walls, 'ms')} "
                         f"| | | {codes} | {left} |")
    return m, "\n".join(lines)


def write(bench, done):
    """The table and every figure so far (after each scenario: a run cut short still leaves what it measured)."""
    m, text = table(bench)
    problems = problems_of(bench.results)
    wall = time.monotonic() - bench.t0
    os.makedirs(bench.args.out, exist_ok=True)
    with open(os.path.join(bench.args.out, "gpu_vs_torchrun.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(bench.args.out, "gpu_vs_torchrun.json"), "w") as f:
        json.dump({"machine": m, "ddprun": bench.ddprun, "torchrun": bench.torchrun, "args": vars(bench.args),
                   "scenarios_done": done, "cut_by_budget": bench.cut, "wall_s": round(wall, 1),
                   "runs": bench.results, "table": text, "problems": problems}, f, indent=1)
    return text, problems, wall


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for gpu_vs_torchrun.json and gpu_vs_torchrun.md")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ddprun")
    p.add_argument("--python")
    p.add_argument("--torchrun", help="torchrun's command line, e.g. 'python3 -m torch.distributed.run'")
    p.add_argument("--steps", type=int, default=200, help="NCCL DDP steps of scenario 5")
    p.add_argument("--cap", type=float, default=5, help="scenario 4: seconds after the exit before a kill")
    p.add_argument("--budget", type=float, default=225, help="seconds: no further run of a scenario that would "
                   "end past it, its first run excepted (0: no limit; default: 4 minutes of a lent GPU machine)")
    p.add_argument("--only", help="comma-separated, of " + ",".join(SCENARIOS))
    p.add_argument("--dry-run", action="store_true", help="1 run each, small sizes: checks that every row works")
    args = p.parse_args()
    todo = args.only.split(",") if args.only else SCENARIOS
    if set(todo) - set(SCENARIOS):
        p.error(f"--only: unknown {', '.join(sorted(set(todo) - set(SCENARIOS)))}")
    if args.dry_run:
        args.runs, args.steps = 1, 20
    bench = Bench(args)
    steps = {"launch": bench.launch, "rank_exit": bench.rank_exit, "gloo_raise": lambda: bench.ddp_exception("gloo"),
             "nccl_raise": lambda: bench.ddp_exception("nccl"), "two_nodes": bench.two_nodes,
             "nccl_wall": bench.nccl_wall}
    done = []
    try:
        for scenario in todo:
            if not (scenario.startswith("nccl") and bench.gpus == 0):
                steps[scenario]()
                done.append(scenario)
                write(bench, done)
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)
    text, problems, wall = write(bench, done)
    print(text + f"\n\n{wall:.0f} s in all; {args.out}/gpu_vs_torchrun.json has every run.")
    for line in problems:
        print("unexpected: " + line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
