#!/usr/bin/env bash
# Rendezvous steady state (issue 33): one ddprun-rendezvous server, one load generator holding N simulated agents
# (real rendezvous Clients on one event loop, 8 ranks each) in a running round over 127.0.0.1: heartbeats at the
# default 1 s, a status with 8 ranks' paces every 5 s per node, one live-view request a second; a worker failure
# injected at FAIL_AT s. Per N, the median over RUNS of: heartbeat round trip p50/p99/max, the server's CPU (and
# its system part) over the measured window, its peak RSS, and the time until every node heard the stop.
#
#   scripts/bench/rdzv_steady.sh [BUILD_DIR] [N...]   (defaults: build, 1000 10000; RUNS=3 STEADY=130 FAIL_AT=120)
set -euo pipefail

build=${1:-build}
shift || true
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1000 10000)
runs=${RUNS:-3} steady=${STEADY:-130} fail_at=${FAIL_AT:-120}
name=rdzv_steady
source "$(dirname "$0")/rdzv_common.sh"
field() { sed -nE "s/.* $1=([-0-9.]+).*/\1/p" <<<"$2"; }

keys=(hb_p50_ms hb_p99_ms hb_max_ms server_cpu_pct server_sys_pct server_rss_kib fail_to_all_ms)
printf "%-7s" nodes; printf " %-15s" "${keys[@]}"; printf "\n"
for n in "${sizes[@]}"; do
  declare -A all=()
  for ((r = 0; r < runs; r++)); do
    rm -f "$work/port"
    "$server" --rdzv-id "steady$r" --nnodes "$n" --host 127.0.0.1 --port 0 --token "$token" \
      --port-file "$work/port" 2>"$work/server.log" &
    pid=$!
    for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
    line=$("$loadgen" --port "$(cat "$work/port")" --nodes "$n" --rdzv-id "steady$r" --token "$token" \
      --steady "$steady" --fail-at "$fail_at" --warmup 10 --server-pid "$pid") || { echo "run failed: $line" >&2; }
    wait "$pid" || true
    echo "  run $((r + 1)): $line" >&2
    for k in "${keys[@]}"; do all[$k]+="$(field "$k" "$line") "; done
    sleep 2  # the previous run's sockets leave TIME_WAIT pressure behind
  done
  printf "%-7s" "$n"
  for k in "${keys[@]}"; do printf " %-15s" "$(tr ' ' '\n' <<<"${all[$k]}" | grep . | median)"; done
  printf "\n"
  unset all
done
