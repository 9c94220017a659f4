#!/usr/bin/python3
"""Hang detection figures (docs/BENCHMARKS.md "Hang detection"); python3 stdlib only, Linux >= 5.3 (pidfds).

  hang.py latency --runs N [--workers W] [--timeout SEC]
  hang.py cpu --workers 64 --hz 10 --seconds 30

latency: ddprun --hang-timeout SEC with W test_workers; rank 1 beats once (beatstamp= records the beat's
CLOCK_MONOTONIC time) and then sleeps silently, the others beat every 50 ms. A pidfd on every worker and on
ddprun timestamps each exit from one poll() loop (time.monotonic_ns is CLOCK_MONOTONIC too). Detection latency
= last exit - last beat - timeout. The stack capture (eu-stack here) is measured from the events file (the
'hung' and 'stacks' events) and reported apart; "excl. capture" subtracts it run by run.

cpu: ddprun with W workers beating HZ times a second each (--hang-timeout 10), against the same workers without
--hang-timeout (nothing to read, the peer in the same run): the run time of ddprun's threads (schedstat) over
SECONDS, after
a 2 s settling period. Both as % of one core.
"""
import argparse, json, os, select, statistics, subprocess, sys, tempfile, time

from single_node_teardown import wait_for_pids  # same directory

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
DDPRUN = os.path.join(BUILD, "launcher", "ddprun")
WORKER = os.path.join(BUILD, "tests", "bin", "test_worker")


def latency_once(workers, timeout):
    with tempfile.TemporaryDirectory(prefix="ddprun-hang.") as tmp:
        pidfile, stamp, events = (os.path.join(tmp, n) for n in ("pids", "stamp", "events"))
        env = dict(os.environ, TMPDIR=tmp)
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", str(workers), "--hang-timeout", str(timeout),
                                 "--events-file", events, WORKER, f"pidfile={pidfile}", f"@1:beatstamp={stamp}",
                                 "@1:hang", "beatfor=600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        pids = wait_for_pids(pidfile, workers, proc)
        fds = {os.pidfd_open(pid): f"rank{r}" for r, pid in pids.items()}
        fds[os.pidfd_open(proc.pid)] = "ddprun"
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        gone = {}
        while len(gone) < len(fds):
            for fd, _ in poller.poll(60_000):
                gone[fds[fd]] = time.monotonic_ns()
                poller.unregister(fd)
                os.close(fd)
        rc = proc.wait()
        with open(stamp) as f:
            beat_ns = int(f.read())
        ev = [json.loads(line) for line in open(events)]
        hung = next(e["time_ms"] for e in ev if e["event"] == "hung")
        stacks = next(e["time_ms"] for e in ev if e["event"] == "stacks")
        total_ms = (max(gone.values()) - beat_ns) / 1e6 - timeout * 1000
        capture_ms = stacks - hung
        return total_ms, capture_ms, total_ms - capture_ms, rc


def cpu_once(workers, hz, seconds, hang_timeout):
    with tempfile.TemporaryDirectory(prefix="ddprun-hang-cpu.") as tmp:
        pidfile = os.path.join(tmp, "pids")
        extra = ["--hang-timeout", str(hang_timeout)] if hang_timeout else []
        every_ms = int(1000 / hz)
        proc = subprocess.Popen([DDPRUN, "--nproc-per-node", str(workers), *extra, WORKER, f"pidfile={pidfile}",
                                 f"beatfor={seconds + 30}:{every_ms}"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                env=dict(os.environ, TMPDIR=tmp))
        try:
            wait_for_pids(pidfile, workers, proc)
            time.sleep(2)

            def run_ns():  # every thread's run time (ns, /proc/PID/task/*/schedstat): finer than utime+stime ticks
                total = 0
                for tid in os.listdir(f"/proc/{proc.pid}/task"):
                    with open(f"/proc/{proc.pid}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0])
                return total

            t0, c0 = time.monotonic(), run_ns()
            time.sleep(seconds)
            t1, c1 = time.monotonic(), run_ns()
            return 100.0 * (c1 - c0) / 1e9 / (t1 - t0)
        finally:
            os.killpg(proc.pid, 15)
            proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["latency", "cpu"])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=1.0)
    ap.add_argument("--hz", type=float, default=10)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    if a.what == "latency":
        rows = []
        for i in range(a.runs):
            rows.append(latency_once(a.workers, a.timeout))
            print(f"run {i}: total {rows[-1][0]:.1f} ms, capture {rows[-1][1]} ms, "
                  f"excl. capture {rows[-1][2]:.1f} ms, rc {rows[-1][3]}", file=sys.stderr)
        med = lambda k: statistics.median(r[k] for r in rows)
        print(f"hang latency over {a.runs} runs, {a.workers} workers, timeout {a.timeout} s: "
              f"excl. capture median {med(2):.1f} ms (min {min(r[2] for r in rows):.1f}, max {max(r[2] for r in rows):.1f}); "
              f"capture median {med(1):.0f} ms; total median {med(0):.1f} ms; rcs {sorted({r[3] for r in rows})}")
    else:
        runs = max(1, a.runs if a.runs != 10 else 3)
        with_hb = [cpu_once(a.workers, a.hz, a.seconds, 10) for _ in range(runs)]
        without = [cpu_once(a.workers, a.hz, a.seconds, 0) for _ in range(runs)]
        print(f"ddprun CPU, {a.workers} workers beating {a.hz:g}/s each, {a.seconds:g} s windows, {runs} runs: "
              f"--hang-timeout 10: median {statistics.median(with_hb):.3f}% of a core {['%.3f' % x for x in with_hb]}; "
              f"without: median {statistics.median(without):.3f}% {['%.3f' % x for x in without]}")


if __name__ == "__main__":
    main()
