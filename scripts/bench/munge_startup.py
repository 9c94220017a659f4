#!/usr/bin/env python3
"""Start-up cost of MUNGE authentication: a 2-node job on 127.0.0.1 with --rdzv-auth munge against the same job
with --rdzv-auth token, beside a private munged (tests/support/munged.py; needs root, as munged does).

  scripts/bench/munge_startup.py [--build build] [--runs 30] [--slurm-runs 20]

job       two `ddprun --nnodes 2 --node-rank R --master-addr 127.0.0.1 --no-python /bin/true` (node 0 hosts the
          rendezvous): time from starting both until both exited 0. The modes alternate run by run, so drift in
          the machine's load hits both alike. With MUNGE the hosting node first checks that munged answers (one
          credential), each node makes one credential and the server decodes two.
srun      `srun -N3 --ntasks-per-node=1 ddprun --rdzv-auth MODE --no-python /bin/true` on the real 3-node SLURM
          test cluster of tests/support/cluster.py (its own munged; DDPRUN_MUNGE_SOCKET points at it): srun's wall
          time, modes alternating, --slurm-runs per mode (0: skip).
per node  what MUNGE adds to one node's join: libmunge's munge_encode (on the node) + munge_decode (at the
          server) for our payload, timed in this process through ctypes, --runs x 20 pairs.
Reported: medians (and quartiles) in ms, and the difference between the modes.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/support"))
from ports import free_port  # noqa: E402
from munged import PrivateMunged  # noqa: E402


def job_seconds(ddprun, mode, env):
    port = free_port()
    t0 = time.perf_counter()
    procs = [subprocess.Popen([ddprun, "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                               "--rdzv-port", str(port), "--rdzv-auth", mode, "--nproc-per-node", "1",
                               "--no-python", "/bin/true"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env) for rank in range(2)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    elapsed = time.perf_counter() - t0
    for p, err in zip(procs, errs):
        if p.returncode != 0:
            sys.exit(f"{mode} job failed with {p.returncode}: {err.decode(errors='replace')}")
    return elapsed


def credential_pair_seconds(socket_path, pairs):
    """munge_encode + munge_decode of one payload like ddprun's, each pair timed."""
    lib = ctypes.CDLL("libmunge.so.2")
    lib.munge_ctx_create.restype = ctypes.c_void_p
    lib.munge_ctx_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
    lib.munge_encode.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    lib.munge_decode.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint),
                                 ctypes.POINTER(ctypes.c_uint)]
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    munge_opt_socket = 8
    ctx = lib.munge_ctx_create()
    lib.munge_ctx_set(ctx, munge_opt_socket, socket_path.encode())
    times = []
    for i in range(pairs):
        payload = f"ddprun-rdzv/1 munge\n{os.urandom(16).hex()}\nbench-{i}".encode()
        cred = ctypes.c_char_p()
        out, length, uid, gid = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint(), ctypes.c_uint()
        t0 = time.perf_counter()
        if lib.munge_encode(ctypes.byref(cred), ctx, payload, len(payload)) != 0:
            sys.exit("munge_encode failed")
        if lib.munge_decode(cred.value, ctx, ctypes.byref(out), ctypes.byref(length), ctypes.byref(uid),
                            ctypes.byref(gid)) != 0:
            sys.exit("munge_decode failed")
        times.append(time.perf_counter() - t0)
        libc.free(ctypes.cast(cred, ctypes.c_void_p))
        libc.free(out)
    lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
    lib.munge_ctx_destroy(ctx)
    return times


def srun_runs(ddprun, runs):
    """{mode: [seconds]} of 3-node steps on the SLURM test cluster; {} when it cannot start here."""
    import unittest
    from cluster import SlurmCluster
    times = {"token": [], "munge": []}
    try:
        with SlurmCluster(nodes=3) as c:
            env = c.env(DDPRUN_MUNGE_SOCKET=c.path("munge/munge.socket"))
            for i in range(runs + 1):  # the first pair warms up
                for mode in (("token", "munge") if i % 2 == 0 else ("munge", "token")):
                    r = c.srun("-N3", "--ntasks-per-node=1", ddprun, "--rdzv-auth", mode, "--nproc-per-node", "1",
                               "--no-python", "/bin/true", env=env)
                    if r.code != 0 or (mode == "munge") != ("MUNGE credential" in r.err):
                        sys.exit(f"srun with {mode} failed or did not authenticate as asked: {r}")
                    if i > 0:
                        times[mode].append(r.elapsed)
    except unittest.SkipTest as e:
        print(f"srun: skipped ({e})")
        return {}
    return times


def describe(values):
    ms = sorted(v * 1000 for v in values)
    q = statistics.quantiles(ms, n=4)
    return statistics.median(ms), q[0], q[2]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--slurm-runs", type=int, default=20)
    args = parser.parse_args()
    ddprun = os.path.abspath(os.path.join(args.build, "launcher/ddprun"))
    with PrivateMunged() as socket_path:
        env = dict(os.environ, DDPRUN_MUNGE_SOCKET=socket_path)
        env.pop("DDPRUN_TOKEN", None)
        for mode in ("token", "munge"):  # warm-up: page cache, munged's first credential
            job_seconds(ddprun, mode, env)
        runs = {"token": [], "munge": []}
        for i in range(args.runs):
            order = ("token", "munge") if i % 2 == 0 else ("munge", "token")
            for mode in order:
                runs[mode].append(job_seconds(ddprun, mode, env))
        pairs = credential_pair_seconds(socket_path, args.runs * 20)
    print(f"2-node loopback job, /bin/true, {args.runs} runs per mode (median [q1, q3], ms)")
    medians = {}
    for mode in ("token", "munge"):
        med, q1, q3 = describe(runs[mode])
        medians[mode] = med
        print(f"  --rdzv-auth {mode:<6} {med:8.2f} [{q1:.2f}, {q3:.2f}]")
    print(f"  MUNGE adds        {medians['munge'] - medians['token']:8.2f} to the job "
          f"(ratio {medians['munge'] / medians['token']:.3f})")
    med, q1, q3 = describe(pairs)
    print(f"per node: munge_encode + munge_decode, {len(pairs)} pairs: {med:.3f} [{q1:.3f}, {q3:.3f}] ms")
    slurm = srun_runs(ddprun, args.slurm_runs) if args.slurm_runs > 0 else {}
    if slurm:
        print(f"srun -N3 on the SLURM test cluster, {args.slurm_runs} runs per mode (median [q1, q3], ms)")
        for mode in ("token", "munge"):
            med, q1, q3 = describe(slurm[mode])
            medians[mode] = med
            print(f"  --rdzv-auth {mode:<6} {med:8.2f} [{q1:.2f}, {q3:.2f}]")
        print(f"  MUNGE adds        {medians['munge'] - medians['token']:8.2f} to the step")


if __name__ == "__main__":
    main()
