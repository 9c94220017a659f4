#!/usr/bin/env bash
# Output benchmark: 8 test_workers each writing 100 MB of ~100-byte lines (`flood=100000000`)
#   - baseline: the same 8 processes (RANK=0..7) started in parallel by sh, each writing straight to /dev/null;
#   - ddprun -q, workers' lines forwarded with the `[rankN]: ` prefix, ddprun's stdout to /dev/null;
#   - ddprun -q --no-prefix, the same without the prefix.
# Runs are interleaved (baseline, ddprun, ddprun --no-prefix, repeated RUNS times) so that load from other users
# of the machine hits all three alike; medians of wall time and of CPU time (user+sys of everything: workers,
# ddprun, sh; bash's `time`). On a quiet machine the 8 workers keep every core busy, so wall overhead ~ CPU
# overhead; under foreign load (the kernel's autogroup gives this session a share) the CPU figure is the steadier.
# Then, if perf is usable, one more run of each ddprun variant under `perf stat --no-inherit`: ddprun's own CPU.
#
# The 2-rank case of issue 35 (800 MB each to a file or a pipe, with and without the prefix, --tee, --redirects,
# and the loop's longest stretch of work) is scripts/bench/output_sinks.py; OUTPUT_SINKS=1 runs it after this one.
#
#   scripts/bench/output.sh [BUILD_DIR]        (default build; env RUNS=5 BYTES=100000000 OUTPUT_SINKS=0)
set -euo pipefail

build=${1:-build}
runs=${RUNS:-5}
bytes=${BYTES:-100000000}
bench=output
. "$(dirname "$0")/single_node_common.sh"

work=$(mktemp -d)
job=
cleanup() {
  # Each timed command runs as its own process group (set -m): the baseline's workers are in its group; ddprun
  # tears its own worker groups down on SIGTERM.
  if [ -n "$job" ]; then kill -TERM -- "-$job" 2>/dev/null; sleep 0.5; kill -KILL -- "-$job" 2>/dev/null; fi
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
set -m

baseline="for r in 0 1 2 3 4 5 6 7; do RANK=\$r $worker flood=$bytes >/dev/null & done; wait"
names=("8 workers straight to /dev/null (sh, &)" "ddprun -q" "ddprun -q --no-prefix")
cmds=("sh -c '$baseline'"
      "$ddprun -q --standalone --nproc-per-node 8 $worker flood=$bytes >/dev/null"
      "$ddprun -q --no-prefix --standalone --nproc-per-node 8 $worker flood=$bytes >/dev/null")

echo "== output: 8 x $bytes bytes of lines (load: $(cut -d' ' -f1-3 /proc/loadavg))"
for ((i = 1; i <= runs; i++)); do
  for k in 0 1 2; do
    bash -c "TIMEFORMAT='$k %R %U %S'; time ( ${cmds[$k]} )" 2>>"$work/times" &
    job=$!
    wait "$job" || { echo "output: '${cmds[$k]}' failed" >&2; exit 1; }
    job=
  done
done

cpu=("" "" "")
if command -v perf >/dev/null && perf stat -e task-clock true >/dev/null 2>&1; then
  for k in 1 2; do
    perf stat --no-inherit -x, -e task-clock -o "$work/perf$k" ${cmds[$k]%>/dev/null} >/dev/null
    cpu[$k]=$(awk -F, '/task-clock/ { printf "%.0f", $1 }' "$work/perf$k")
  done
fi

/usr/bin/python3 - "$work/times" "${names[@]}" "${cpu[@]}" <<'PY'
import statistics, sys
times, names, cpu = sys.argv[1], sys.argv[2:5], sys.argv[5:8]
wall, cputime = {0: [], 1: [], 2: []}, {0: [], 1: [], 2: []}
for line in open(times):
    f = line.split()
    if len(f) == 4 and f[0] in "012":
        wall[int(f[0])].append(float(f[1]))
        cputime[int(f[0])].append(float(f[2]) + float(f[3]))
med = {k: statistics.median(v) for k, v in wall.items()}
cmed = {k: statistics.median(v) for k, v in cputime.items()}
print(f"{'what':40} {'wall s':>7} {'overhead':>9} {'CPU s':>7} {'overhead':>9} {'ddprun CPU s':>13}  wall runs (s)")
for k in range(3):
    over = "" if k == 0 else f"{(med[k] / med[0] - 1) * 100:+.1f}%"
    cover = "" if k == 0 else f"{(cmed[k] / cmed[0] - 1) * 100:+.1f}%"
    own = f"{int(cpu[k]) / 1000:.2f}" if cpu[k] else ""
    print(f"{names[k]:40} {med[k]:7.2f} {over:>9} {cmed[k]:7.2f} {cover:>9} {own:>13}  "
          + " ".join(f"{x:.2f}" for x in wall[k]))
worst = max(med[1], med[2]) / med[0] - 1
cworst = max(cmed[1], cmed[2]) / cmed[0] - 1
print(f"target: wall overhead {worst * 100:+.1f}% (worst of the two): {'met' if worst <= 0.10 else 'MISSED'} (≤ 10%); "
      f"CPU overhead {cworst * 100:+.1f}%: {'met' if cworst <= 0.10 else 'MISSED'}")
PY

if [ "${OUTPUT_SINKS:-0}" = 1 ]; then
  /usr/bin/python3 "$(dirname "$0")/output_sinks.py" --ddprun "$ddprun" --worker "$worker" --runs "$runs"
fi
