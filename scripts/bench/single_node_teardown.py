#!/usr/bin/python3
"""Teardown timer for scripts/bench/teardown.sh (python3 stdlib only, Linux >= 5.3 for pidfds).

  single_node_teardown.py --runs N --workers W [--jitter SEC] --name NAME -- LAUNCHER ARGS...

Each run starts the launcher (stdout/stderr to /dev/null) with {pidfile} and {go} in ARGS replaced by paths in a
fresh temp dir. The workers must append their pids to {pidfile} (test_worker pidfile=) and worker 1 must exit once
{go} exists (test_worker @1:waitfile=). Once all W pids are in, a pidfd is opened on every worker and on the
launcher, {go} is created (after a random 0..SEC pause, so that the failure falls anywhere within a polling
launcher's monitor interval, as a real one would), and one poll() loop timestamps each pidfd as it becomes readable (= that process has
exited). Teardown = last exit (any worker or the launcher) - worker 1's exit, both seen by the same observer.
Prints one line: NAME median_ms min_ms max_ms launcher_rcs workers_gone_median_ms [per-run ms ...]; the per-run detail goes to stderr.
"""
import argparse, os, random, select, signal, statistics, subprocess, sys, tempfile, time


def wait_for_pids(pidfile, n, proc, timeout=30):
    """{rank: pid} once `n` workers have written their "RANK PID ..." lines to `pidfile` (test_worker's pidfile=)."""
    deadline = time.monotonic() + timeout
    pids = {}
    while len(pids) < n:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"workers did not all start (have {len(pids)}, launcher rc {proc.poll()})")
        time.sleep(0.005)
        if os.path.exists(pidfile):
            with open(pidfile) as f:
                for line in f:
                    if line.endswith("\n"):
                        rank, pid, _ = line.split()
                        pids[int(rank)] = int(pid)
    return pids


def run_once(cmd, workers, timeout, jitter):
    with tempfile.TemporaryDirectory(prefix="ddprun-teardown.") as tmp:
        pidfile, go = os.path.join(tmp, "pids"), os.path.join(tmp, "go")
        argv = [a.replace("{pidfile}", pidfile).replace("{go}", go) for a in cmd]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        pids = {}
        fds = {}
        try:
            deadline = time.monotonic() + timeout
            pids = wait_for_pids(pidfile, workers, proc, timeout)
            time.sleep(0.05)  # let the launcher settle (torchrun finishes its own start-up bookkeeping)
            fds = {os.pidfd_open(pid): f"rank{rank}" for rank, pid in pids.items()}
            fds[os.pidfd_open(proc.pid)] = "launcher"
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            time.sleep(random.uniform(0, jitter))
            open(go, "w").close()
            gone = {}
            while len(gone) < len(fds):
                left = deadline + 120 - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"still alive: {sorted(set(fds.values()) - set(gone))}")
                ready = poller.poll(left * 1000)
                now = time.monotonic_ns()
                for fd, _ in ready:
                    gone[fds[fd]] = now
                    poller.unregister(fd)
            rc = proc.wait()
            t0 = gone["rank1"]
            workers_ms = (max(t for k, t in gone.items() if k != "launcher") - t0) / 1e6
            launcher_ms = (gone["launcher"] - t0) / 1e6
            return max(workers_ms, launcher_ms), workers_ms, launcher_ms, rc
        finally:
            for fd in fds:
                os.close(fd)
            for pid in pids.values():  # stragglers (a failed run): never leave a worker behind
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--name", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--jitter", type=float, default=0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    totals, gone, rcs = [], [], set()
    for i in range(a.runs):
        total, workers_ms, launcher_ms, rc = run_once(cmd, a.workers, a.timeout, a.jitter)
        print(f"  {a.name} run {i + 1}: {total:.1f} ms (last worker gone {workers_ms:.1f} ms, "
              f"launcher exited {launcher_ms:.1f} ms, rc {rc})", file=sys.stderr)
        totals.append(total)
        gone.append(workers_ms)
        rcs.add(rc)
    print(a.name.replace(" ", "_"), f"{statistics.median(totals):.1f}", f"{min(totals):.1f}", f"{max(totals):.1f}",
          ",".join(map(str, sorted(rcs))), f"{statistics.median(gone):.1f}", " ".join(f"{t:.1f}" for t in totals))


if __name__ == "__main__":
    main()
