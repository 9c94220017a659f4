#!/usr/bin/env bash
# Idle benchmark: CPU time used by the launcher process itself over 10 s while it supervises 8 sleeping
# test_workers (`hang`), sampled 1 s after all 8 workers are up. Two counters of the launcher's own process:
# utime+stime from /proc/PID/stat (clock ticks, 10 ms each here) and the sum of the threads' run time from
# /proc/PID/task/*/schedstat (ns). Peer, for the record: torchrun 1.13's agent at --monitor_interval 5 and 0.1.
#
#   scripts/bench/idle.sh [BUILD_DIR]          (default build; env RUNS=3 SECONDS_IDLE=10 NO_TORCHRUN=1)
set -euo pipefail

build=${1:-build}
runs=${RUNS:-3}
window=${SECONDS_IDLE:-10}
bench=idle
. "$(dirname "$0")/single_node_common.sh"
require_peer
tick=$(getconf CLK_TCK)

work=$(mktemp -d)
launcher=
kill_workers() {  # SIGKILL the workers of the current run that are still alive (and still our test_worker)
  local f pid
  for f in "$work"/ready/ready.*; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if grep -qs "test_worker" "/proc/$pid/cmdline"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$work/ready"
}
cleanup() {
  if [ -n "$launcher" ]; then
    kill -TERM "$launcher" 2>/dev/null && sleep 0.3
    kill -KILL "$launcher" 2>/dev/null || true
    kill_workers
  fi
  wait 2>/dev/null
  rm -rf "$work"
  return 0
}
trap cleanup EXIT

ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }        # utime + stime (fields 14, 15)
runtime_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
wakeups() { awk '/ctxt_switches/ { s += $2 } END { print s }' "/proc/$1/status"; }

measure() {  # measure NAME LAUNCHER...  -> appends "name ms_ticks ms_runtime wakeups" per run
  local name=$1 i t0 r0 w0 t1 r1 w1
  shift
  for ((i = 1; i <= runs; i++)); do
    mkdir "$work/ready"
    "$@" "$worker" ready="$work/ready" hang >/dev/null 2>&1 &
    launcher=$!
    for ((w = 0; w < 3000; w++)); do
      [ "$(ls "$work/ready" | grep -c '^ready\.[0-9]*$')" -ge 8 ] && break
      sleep 0.01
    done
    sleep 1
    t0=$(ticks "$launcher") r0=$(runtime_ns "$launcher") w0=$(wakeups "$launcher")
    sleep "$window"
    t1=$(ticks "$launcher") r1=$(runtime_ns "$launcher") w1=$(wakeups "$launcher")
    echo "$name|$(((t1 - t0) * 1000 / tick))|$(((r1 - r0) / 1000))|$((w1 - w0))" >>"$work/rows"
    kill -TERM "$launcher"
    wait "$launcher" 2>/dev/null || true
    kill_workers  # the launcher's teardown should have left none
    launcher=
  done
}

echo "== idle: launcher CPU over ${window} s with 8 hanging workers (load: $(cut -d' ' -f1-3 /proc/loadavg))"
measure "ddprun" "$ddprun" -q --standalone --nproc-per-node 8
if [ -z "${NO_TORCHRUN:-}" ]; then
  mkdir "$work/tmp"  # torchrun's TMPDIR: it leaves its torchelastic_* run directories behind
  measure "torchrun 1.13 (monitor 5 s, default)" env TMPDIR="$work/tmp" /usr/bin/python3 "$peer" --standalone --nproc_per_node 8 --no_python
  measure "torchrun 1.13 (monitor 0.1 s)" env TMPDIR="$work/tmp" /usr/bin/python3 "$peer" --standalone --nproc_per_node 8 \
    --monitor_interval 0.1 --no_python
fi

/usr/bin/python3 - "$work/rows" "$window" <<'PY'
import statistics, sys
rows, window = {}, float(sys.argv[2])
for line in open(sys.argv[1]):
    name, ticks_ms, run_us, wake = line.rstrip("\n").split("|")
    rows.setdefault(name, []).append((int(ticks_ms), int(run_us), int(wake)))
print(f"{'launcher':40} {'stat ms':>8} {'sched ms':>9} {'% core':>8} {'wakeups/s':>10} {'runs':>5} {'÷ ddprun':>9}")
base = None
for name, r in rows.items():
    t = statistics.median(x[0] for x in r)
    s = statistics.median(x[1] for x in r) / 1000
    w = statistics.median(x[2] for x in r) / window
    base = base if base is not None else s
    ratio = f"{s / base:8.0f}x" if base > 0 else ("       1x" if s == 0 else "      inf")
    print(f"{name:40} {t:8.0f} {s:9.3f} {s / window / 10:7.4f}% {w:10.1f} {len(r):5d} {ratio}")
ddp = statistics.median(x[1] for x in rows["ddprun"]) / 1000
print(f"(stat ms: utime+stime, {window:.0f} s window, 10 ms resolution; sched ms: schedstat run time of all threads)")
print(f"target: ddprun {ddp / window / 10:.4f}% of a core: {'met' if ddp / window / 10 < 0.1 else 'MISSED'} (< 0.1%)")
PY
