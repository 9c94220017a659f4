#!/usr/bin/python3
"""False alarms of --hang-timeout: long quiet phases a training job declares must never be taken for a hang.

Each run: ddprun --nproc-per-node 2 --hang-timeout 5 on a script of real gloo ranks (Debian's python3-torch) that
beats every step (a 1-element all_reduce, 50 ms) and, after step 10, runs a 12 s "evaluation" on every rank and then
a 12 s "checkpoint save" on rank 0 while rank 1 waits in a barrier: each inside ddprun_heartbeat.quiet(20), as
the README says to. Then 10 more steps. A run is a false alarm when ddprun ends it as hung (exit 78); it must exit 0.
--control runs the same job without the quiet phases once, which must be found hung (exit 78): the check can fail.

  hang_false_alarms.py [--runs 5] [--control] [--build BUILD]
"""
import argparse, os, subprocess, sys, tempfile, textwrap, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

SCRIPT = """
    import contextlib, os, time, torch, torch.distributed as dist, ddprun_heartbeat
    QUIET = os.environ.get("NO_QUIET") is None
    phase = ddprun_heartbeat.quiet if QUIET else (lambda seconds: contextlib.nullcontext())
    dist.init_process_group("gloo")
    rank, t = dist.get_rank(), torch.ones(1)
    for step in range(20):
        ddprun_heartbeat.beat(step)
        dist.all_reduce(t)
        time.sleep(0.05)
        if step == 10:
            with phase(20):                      # evaluation on every rank
                time.sleep(12)
            with phase(20):                      # rank 0 saves, rank 1 waits for it
                if rank == 0:
                    time.sleep(12)
                dist.barrier()
    print("done", flush=True)
"""


def run(build, quiet, tmp):
    script = os.path.join(tmp, "job.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3", TMPDIR=tmp,
               PYTHONPATH=os.path.abspath(os.path.join(ROOT, "python")))
    if not quiet:
        env["NO_QUIET"] = "1"
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(build, "launcher", "ddprun"), "--nproc-per-node", "2", "--hang-timeout", "5",
                        script], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    return p.returncode, time.monotonic() - t0, p.stderr.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--control", action="store_true")
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    a = ap.parse_args()
    alarms = 0
    for i in range(a.runs):
        with tempfile.TemporaryDirectory(prefix="ddprun-fa.") as tmp:
            rc, secs, err = run(a.build, True, tmp)
        alarms += rc == 78
        print(f"run {i}: exit {rc} in {secs:.1f} s" + ("  FALSE ALARM" if rc == 78 else ""), flush=True)
        if rc not in (0, 78):
            print(err[-2000:], file=sys.stderr)
    print(f"false alarms: {alarms} of {a.runs} runs (two 12 s quiet phases each, --hang-timeout 5)")
    if a.control:
        with tempfile.TemporaryDirectory(prefix="ddprun-fa.") as tmp:
            rc, secs, err = run(a.build, False, tmp)
        root = [line for line in err.splitlines() if line.startswith("ddprun: root cause:")]
        print(f"control without quiet phases: exit {rc} in {secs:.1f} s ({'hung, as it must' if rc == 78 else 'NOT caught'})"
              + (f"\n  {root[0][:200]}" if root else ""))


if __name__ == "__main__":
    main()
