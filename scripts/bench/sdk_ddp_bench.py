#!/usr/bin/env python3
"""Worker SDK DDP vs PyTorch's Python DDP, side by side in one run (stdlib only).

Runs build-sdk/examples/ddp_bench/ddp_bench (C++, worker SDK) and ../shared/peers/py_ddp_bench.py
(Python DDP) on the same model, batch, synthetic data, gloo and one thread per rank, alternating them
run by run so machine noise hits both alike. Reports the median over runs of steps/s per rank (mean of
the ranks), the C++/Python ratio at 2 ranks and each side's scaling efficiency (2 ranks vs 1 rank).

usage: sdk_ddp_bench.py [--runs 5] [--model cnn|mlp|both] [--bin PATH] [--peer PATH] [--variants]
--variants: 2 ranks only, the SDK's DDP with each design choice undone in turn, beside Python DDP.
"""
import argparse, os, re, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = {  # model -> (env, steps)
    "cnn": ({"BATCH": "64"}, 100),
    "mlp": ({"MODEL": "mlp", "BATCH": "32"}, 2000),
}


def run(cmd, env, copies=1):
    """Mean steps/s over the ranks of `copies` simultaneous runs of cmd."""
    procs = [subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(copies)]
    rates = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        found = [float(m) for m in re.findall(r"rank \d+/\d+: ([0-9.]+) steps/s", stdout)]
        if p.returncode != 0 or not found:
            sys.exit(f"failed: {' '.join(cmd)}\n{stdout}\n{stderr}")
        rates += found
    return statistics.mean(rates)


VARIANTS = {  # name -> env of ddp_bench
    "sdk default": {},
    "busy-poll on last bucket": {"DDP_BUSY_POLL": "1"},
    "one bucket (no overlap)": {"DDP_FIRST_BUCKET_MB": "1000", "DDP_BUCKET_MB": "1000"},
    "4 MiB segments": {"DDP_SEGMENT_MB": "4"},
    "via ProcessGroupGloo": {"DDP_VIA_PROCESS_GROUP": "1"},
}


def variants(a, models):
    results = {}
    for i in range(a.runs):
        for model in models:
            env, steps = CONFIGS[model]
            runs = [(name, [a.bin], {**env, **venv}) for name, venv in VARIANTS.items()]
            runs.append(("python DDP", ["/usr/bin/python3", a.peer], env))
            for name, cmd, e in runs:
                r = run(cmd + ["2", str(steps)], {**e, "OMP_NUM_THREADS": "1"})
                results.setdefault((model, name), []).append(r)
                print(f"run {i + 1} {model} {name}: {r:.2f}", flush=True)
    print("\nmedian steps/s per rank, 2 ranks, over %d runs" % a.runs)
    print("| model | " + " | ".join(list(VARIANTS) + ["python DDP"]) + " |")
    print("|---" * (len(VARIANTS) + 2) + "|")
    for model in models:
        print(f"| {model} | " + " | ".join(f"{statistics.median(results[(model, n)]):.2f}"
                                        for n in list(VARIANTS) + ["python DDP"]) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--model", default="both", choices=["cnn", "mlp", "both"])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-sdk/examples/ddp_bench/ddp_bench"))
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(ROOT), "shared/peers/py_ddp_bench.py"))
    ap.add_argument("--variants", action="store_true")
    a = ap.parse_args()
    models = ["cnn", "mlp"] if a.model == "both" else [a.model]
    if a.variants:
        return variants(a, models)
    results = {}
    for i in range(a.runs):
        for model in models:
            env, steps = CONFIGS[model]
            for world in (1, 2):
                for impl, cmd in (("cpp", [a.bin]), ("py", ["/usr/bin/python3", a.peer])):
                    r = run(cmd + [str(world), str(steps)], {**env, "OMP_NUM_THREADS": "1"})
                    results.setdefault((model, impl, world), []).append(r)
                    print(f"run {i + 1} {model} {impl} world {world}: {r:.2f} steps/s per rank "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
            # The machine's own ceiling for "scaling": two independent 1-rank runs at the same time
            # (no communication at all) share caches, memory bandwidth and the hypervisor.
            r = run([a.bin, "1", str(steps)], {**env, "OMP_NUM_THREADS": "1"}, copies=2)
            results.setdefault((model, "pair", 1), []).append(r)
            print(f"run {i + 1} {model} two independent 1-rank C++ runs: {r:.2f} steps/s each", flush=True)
    print("\nmedian steps/s per rank over %d runs" % a.runs)
    print("| model | C++ SDK 1 rank | C++ SDK 2 ranks | Python DDP 1 rank | Python DDP 2 ranks | "
          "C++/Python (2 ranks) | scaling C++ | scaling Python | ceiling (2 independent 1-rank runs) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in models:
        m = {k: statistics.median(results[(model,) + k]) for k in
             [("cpp", 1), ("cpp", 2), ("py", 1), ("py", 2)]}
        print(f"| {model} | {m['cpp', 1]:.2f} | {m['cpp', 2]:.2f} | {m['py', 1]:.2f} | {m['py', 2]:.2f} | "
              f"{m['cpp', 2] / m['py', 2]:.2f}x | {100 * m['cpp', 2] / m['cpp', 1]:.1f}% | "
              f"{100 * m['py', 2] / m['py', 1]:.1f}% | "
              f"{100 * statistics.median(results[(model, 'pair', 1)]) / m['cpp', 1]:.1f}% |")


if __name__ == "__main__":
    main()
