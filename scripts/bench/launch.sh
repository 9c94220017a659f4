#!/usr/bin/env bash
# Launch benchmark: wall time of `ddprun --standalone --nproc-per-node 8 /bin/true` against
#   - a shell-free baseline: `xargs -P8 -n1 -a LIST /bin/true` (one process forking and waiting for 8 /bin/true
#     in parallel, as ddprun does; no shell is involved), and
#   - torchrun 1.13 (`--no_python /bin/true`) at its default --monitor_interval 5 and at 0.1 (torchrun 2.x default).
# hyperfine with --shell=none; median of RUNS runs (TORCH_RUNS for torchrun), after warm-up runs. Diagnostic row:
# ddprun with TMPDIR=/dev/shm, i.e. its per-run scratch directory (error files) on tmpfs instead of /tmp.
#
#   scripts/bench/launch.sh [BUILD_DIR]        (default build; env RUNS=30 TORCH_RUNS=5, NO_TORCHRUN=1 to skip it)
set -euo pipefail

build=${1:-build}
runs=${RUNS:-30}
torch_runs=${TORCH_RUNS:-5}
bench=launch
. "$(dirname "$0")/single_node_common.sh"
require_peer
command -v hyperfine >/dev/null || { echo "launch: hyperfine not installed (apt-get install hyperfine)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'x\n%.0s' 1 2 3 4 5 6 7 8 >"$work/eight"

echo "== launch: 8 workers of /bin/true (load: $(cut -d' ' -f1-3 /proc/loadavg))"
hyperfine -N --style basic --warmup 5 --runs "$runs" --export-json "$work/fast.json" \
  -n ddprun "$ddprun -q --standalone --nproc-per-node 8 /bin/true" \
  -n "8x /bin/true (xargs -P8)" "xargs -P8 -n1 -a $work/eight /bin/true" \
  -n "ddprun, TMPDIR=/dev/shm (diagnostic)" "env TMPDIR=/dev/shm $ddprun -q --standalone --nproc-per-node 8 /bin/true" \
  >/dev/null
jsons=("$work/fast.json")
if [ -z "${NO_TORCHRUN:-}" ]; then
  hyperfine -N --style basic --warmup 1 --runs "$torch_runs" --export-json "$work/torch.json" \
    -n "torchrun 1.13 (monitor 5 s, default)" \
    "env TMPDIR=$work /usr/bin/python3 $peer --standalone --nproc_per_node 8 --no_python /bin/true" \
    -n "torchrun 1.13 (monitor 0.1 s)" \
    "env TMPDIR=$work /usr/bin/python3 $peer --standalone --nproc_per_node 8 --monitor_interval 0.1 --no_python /bin/true" >/dev/null
  jsons+=("$work/torch.json")
fi

/usr/bin/python3 - "${jsons[@]}" <<'PY'
import json, sys
rows = []
for path in sys.argv[1:]:
    for r in json.load(open(path))["results"]:
        rows.append((r["command"], r["median"] * 1e3, min(r["times"]) * 1e3, max(r["times"]) * 1e3, len(r["times"])))
ddp = rows[0][1]
print(f"{'command':40} {'median ms':>10} {'min':>8} {'max':>8} {'runs':>5} {'÷ ddprun':>9}")
for name, med, lo, hi, n in rows:
    print(f"{name:40} {med:10.1f} {lo:8.1f} {hi:8.1f} {n:5d} {med / ddp:8.1f}x")
torch = [r for r in rows if r[0].startswith("torchrun")]
fastest = min((r[1] for r in torch), default=None)
verdict = f"{'met' if ddp <= 50 else 'MISSED'} (≤ 50 ms)"
if fastest is not None:
    verdict += f"; {fastest / ddp:.0f}x faster than the fastest torchrun: {'met' if fastest / ddp >= 25 else 'MISSED'} (≥ 25x)"
print(f"target: ddprun median {ddp:.1f} ms {verdict}")
PY
