#!/usr/bin/env bash
# Teardown benchmark: 8 test_workers, rank 1 exits with code 3 at an instant observed through a pidfd; measured
# is the time from that exit until every worker has exited and the launcher itself has exited (all observed by
# one poll() loop over pidfds: scripts/bench/single_node_teardown.py). For torchrun the failure is put at a random
# point of its monitor interval. The other 7 workers `hang` and die on
# SIGTERM. Peers, same worker: torchrun 1.13 --no_python at --monitor_interval 5 (its default) and 0.1 (2.x's).
# Also recorded: one worker ignoring SIGTERM (ddprun --term-timeout 1; torchrun's SIGKILL grace is a fixed 30 s).
#
#   scripts/bench/teardown.sh [BUILD_DIR]      (default build; env RUNS=10 TORCH_RUNS=5 IGNORE_RUNS=3,
#                                              TORCH_IGNORE_RUNS=1 (0 skips the 30 s torchrun run), NO_TORCHRUN=1)
set -euo pipefail

build=${1:-build}
runs=${RUNS:-10}
torch_runs=${TORCH_RUNS:-5}
ignore_runs=${IGNORE_RUNS:-3}
torch_ignore_runs=${TORCH_IGNORE_RUNS:-1}
bench=teardown
. "$(dirname "$0")/single_node_common.sh"
require_peer

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$work/rows
mkdir "$work/tmp"  # torchrun's TMPDIR: it leaves its torchelastic_* run directories behind
steps=(pidfile={pidfile} @1:waitfile={go} @1:exit=3 hang)
ignoring=(@2:ignore=TERM "${steps[@]}")
measure() {  # measure RUNS JITTER NAME LAUNCHER...
  local n=$1 jitter=$2 name=$3
  shift 3
  [ "$n" -gt 0 ] || return 0
  /usr/bin/python3 "$here/single_node_teardown.py" --runs "$n" --jitter "$jitter" --name "$name" -- "$@" >>"$out"
}
torchrun() { echo env TMPDIR="$work/tmp" /usr/bin/python3 "$peer" --standalone --nproc_per_node 8 --monitor_interval "$1" --no_python "$worker"; }

echo "== teardown: 8 workers, rank 1 exits 3 (load: $(cut -d' ' -f1-3 /proc/loadavg))"
measure "$runs" 0 "ddprun" "$ddprun" -q --standalone --nproc-per-node 8 "$worker" "${steps[@]}"
# Diagnostic: ddprun's per-run scratch directory (error files) on tmpfs instead of /tmp; on an ext4 mounted with
# `discard` (as here) removing it at exit costs one synchronous discard per directory.
TMPDIR=/dev/shm measure "$runs" 0 "ddprun, TMPDIR=/dev/shm (diagnostic)" \
  "$ddprun" -q --standalone --nproc-per-node 8 "$worker" "${steps[@]}"
if [ -z "${NO_TORCHRUN:-}" ]; then
  measure "$torch_runs" 5 "torchrun 1.13 (monitor 5 s, default)" $(torchrun 5) "${steps[@]}"
  measure "$torch_runs" 0.1 "torchrun 1.13 (monitor 0.1 s)" $(torchrun 0.1) "${steps[@]}"
fi
measure "$ignore_runs" 0 "ddprun, rank 2 ignores SIGTERM (--term-timeout 1)" \
  "$ddprun" -q --standalone --nproc-per-node 8 --term-timeout 1 "$worker" "${ignoring[@]}"
[ -z "${NO_TORCHRUN:-}" ] && measure "$torch_ignore_runs" 0.1 "torchrun 1.13 (monitor 0.1 s), rank 2 ignores SIGTERM" \
  $(torchrun 0.1) "${ignoring[@]}"

awk -v OFS='' '
  NR == 1 { ddp = $2 }
  { name = $1; gsub(/_/, " ", name); rows[NR] = name; med[NR] = $2; lo[NR] = $3; hi[NR] = $4; rc[NR] = $5
    gone[NR] = $6; runs[NR] = NF - 6 }
  END {
    printf "%-56s %10s %9s %9s %13s %4s %5s %9s\n", "launcher", "median ms", "min", "max", "workers gone", "rc", "runs",
      "÷ ddprun"
    for (i = 1; i <= NR; i++)
      printf "%-56s %10.1f %9.1f %9.1f %13.1f %4s %5d %8.1fx\n", rows[i], med[i], lo[i], hi[i], gone[i], rc[i], runs[i],
        med[i] / ddp
    print "(median ms: until every worker and the launcher have exited; workers gone: median until the last worker)"
    printf "target: ddprun median %.1f ms (SIGTERM-honouring workers): %s (≤ 20 ms)\n", ddp, ddp <= 20 ? "met" : "MISSED"
  }' "$out"
