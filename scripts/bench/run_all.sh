#!/usr/bin/env bash
# The single-node launcher benchmarks of docs/BENCHMARKS.md ("Launcher (single node)"): launch, teardown, idle,
# output, one after another, each printing its own table (medians, ratios against the peers measured in the same
# run, target met or missed). The machine and its load are printed first: the machine is shared, so look at the
# load and re-run a noisy benchmark when it is quieter.
#
#   scripts/bench/run_all.sh [BUILD_DIR]       (default build; the scripts' RUNS-style env variables pass through)
set -euo pipefail

build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r); $(date -u '+%F %T UTC')"
echo "ddprun: $(realpath "$build/launcher/ddprun") ($("$build/launcher/ddprun" --version 2>&1 | head -1))"
status=0
for bench in launch teardown idle output; do
  echo
  echo "load before $bench: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$here/$bench.sh" "$build" || { echo "run_all: $bench.sh failed" >&2; status=1; }
done
exit $status
