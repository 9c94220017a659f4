#!/usr/bin/env bash
# Rendezvous scale benchmark: one ddprun-rendezvous server, one load generator opening N simulated agents
# (real rendezvous Clients on one event loop) over 127.0.0.1. Reports, per N, the median over RUNS of the
# time until every agent holds its assignment (and until `complete` reached all), the server's own figure
# (its first hello until every assignment was handed to the kernel), and the server's peak RSS.
#
#   scripts/bench/rdzv_scale.sh [BUILD_DIR] [N...]        (defaults: build, 1000 10000 100000; RUNS=3)
#
# Each process holds a descriptor per agent: the open-files limit is raised (the hard one too where allowed:
# root with CAP_SYS_RESOURCE, up to /proc/sys/fs/nr_open); a size that still does not fit is skipped, said so.
# From SPREAD_FROM agents on (20000; one source address's ephemeral ports stop near 28 000) the agents connect
# from addresses spread over 127.0.0.0/8 (--spread-sources).
set -euo pipefail

build=${1:-build}
shift || true
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(1000 10000 100000)
runs=${RUNS:-3}
spread_from=${SPREAD_FROM:-20000}
name=rdzv_scale
skip_unfit=1
source "$(dirname "$0")/rdzv_common.sh"

printf "%-7s %-16s %-16s %-16s %-18s %s\n" nodes "assign_ms(med)" "complete_ms(med)" "server_ms(med)" \
  "server_rss_kib(max)" "assign_ms(all)"
for n in "${sizes[@]}"; do
  if ! fits "$n"; then
    echo "$n skipped: $((n + 64)) descriptors needed per process, the limit is $(ulimit -n) (ulimit -Hn: $(ulimit -Hn))"
    continue
  fi
  spread=()
  [ "$n" -ge "$spread_from" ] && spread=(--spread-sources)
  assign=() complete=() server_ms=() rss=()
  for ((r = 0; r < runs; r++)); do
    rm -f "$work/port"
    "$server" --rdzv-id "bench$r" --nnodes "$n" --host 127.0.0.1 --port 0 --token "$token" \
      --port-file "$work/port" --heartbeat-interval 1 --heartbeat-timeout 10 --log-level info 2>"$work/server.log" &
    pid=$!
    for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
    line=$("$loadgen" --port "$(cat "$work/port")" --nodes "$n" --rdzv-id "bench$r" --token "$token" \
      --timeout $((n / 1000 > 60 ? n / 1000 : 60)) "${spread[@]}") || { kill "$pid" 2>/dev/null || true; }
    wait "$pid" || true
    assign+=("$(sed -E 's/.*assign_ms=([0-9.]+).*/\1/' <<<"$line")")
    complete+=("$(sed -E 's/.*complete_ms=([0-9.]+).*/\1/' <<<"$line")")
    server_ms+=("$(sed -nE 's/.*handed to [0-9]+ nodes ([0-9.]+) ms after the first hello.*/\1/p' "$work/server.log")")
    rss+=("$(sed -nE 's/.*peak RSS ([0-9]+) KiB.*/\1/p' "$work/server.log")")
    sleep 1  # let the previous run's sockets leave TIME_WAIT pressure behind
  done
  printf "%-7s %-16s %-16s %-16s %-18s %s\n" "$n" "$(printf '%s\n' "${assign[@]}" | median)" \
    "$(printf '%s\n' "${complete[@]}" | median)" "$(printf '%s\n' "${server_ms[@]}" | median)" \
    "$(printf '%s\n' "${rss[@]}" | sort -n | tail -1)" "${assign[*]}"
done
