#!/usr/bin/env bash
# The etcd partition nemesis (issue 53) at length: tests/integration/test_etcd_partitions.py's random schedules,
# SCHEDULES of them (default 20) from SEED (default 1), each a seeded random set of faults (a host cut with its etcd
# member, frames one way only into or out of a host; the job's host or another; fixed-size and elastic jobs) judged
# by tests/support/job_checker.py. Needs root (network namespaces) and etcd. Prints one line per schedule and the
# count of violations (failed schedules, each with the seed that reproduces it). HEARTBEAT=default runs the agents
# with ddprun's default heartbeats (1 s, 15 s: a node is lost after the host's 10 s etcd lease could run out) instead
# of 0.5 s and 3 s.
#   [SCHEDULES=20] [SEED=1] [HEARTBEAT=default] scripts/bench/etcd_nemesis.sh [BUILD]   BUILD defaults to build
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "${1:-build}" && pwd)
cd tests/integration
DDPRUN="$build/launcher/ddprun" TEST_WORKER="$build/tests/bin/test_worker" PYTHONDONTWRITEBYTECODE=1 \
DDPRUN_NEMESIS_SCHEDULES="${SCHEDULES:-20}" DDPRUN_NEMESIS_SEED="${SEED:-1}" DDPRUN_NEMESIS_HEARTBEAT="${HEARTBEAT:-}" \
  python3 -m unittest -v test_etcd_partitions.EtcdPartitions.test_random_schedules 2>&1 | tee /dev/stderr |
  python3 -c '
import re, sys
text = sys.stdin.read()
ran = len(re.findall(r"seed \d+: .* exits \[", text))
failed = len(re.findall(r"^FAIL: test_random_schedules .*\(seed=(\d+)\)", text, re.M))
print(f"nemesis: {ran + failed} schedules, {failed} violations")
sys.exit(1 if failed or "Error" in text.split("Ran ")[-1] else 0)'
