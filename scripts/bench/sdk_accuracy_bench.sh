#!/usr/bin/env bash
# Fashion-MNIST test accuracy per epoch with the example's default recipe (BatchNorm CNN, one-cycle SGD with
# Nesterov momentum, peak lr 0.1 per 256 samples): 1 rank vs 2 ranks at the same global batch (256 = 1 x 256 =
# 2 x 128, so both take the same optimizer steps with the same learning rates), both through embedded spawn,
# then the same model and recipe in Python DDP (torch 1.13, scripts/bench/fashion_mnist_ddp.py) on 2 ranks.
# Prints each epoch line, each run's wall time and load average, and the 2-rank minus 1-rank difference.
# Compare with the data set's published baselines (README of dataset-fashion-mnist).
# usage: scripts/bench/sdk_accuracy_bench.sh [fashion_mnist binary] (default build-main/examples/...)
#   EPOCHS (default 4), PEER=0 skips the Python run.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build-main/examples/fashion_mnist/fashion_mnist}
epochs=${EPOCHS:-4}
declare -A acc
run() {  # label, command...
  local label=$1 start end out
  shift
  start=$(date +%s.%N)
  out=$(OMP_NUM_THREADS=1 "$@")
  end=$(date +%s.%N)
  echo "$out" | grep '^epoch [0-9]* test_loss' | sed "s/^/$label: /"
  acc[$label]=$(echo "$out" | grep '^epoch [0-9]* test_loss' | tail -1 | sed -E 's/.*accuracy ([0-9.]+)%.*/\1/')
  printf '%s: %.1f s wall, load average %s\n' "$label" "$(echo "$end - $start" | bc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
}
for n in 1 2; do
  run "sdk $n rank(s)" "$bin" --nproc "$n" --epochs "$epochs" --batch-size $((256 / n)) --threads 1 --log-every 100000
done
if [ "${PEER:-1}" != 0 ]; then
  run "python DDP 2 ranks" /usr/bin/python3 scripts/bench/fashion_mnist_ddp.py --nproc 2 --epochs "$epochs" \
    --batch-size 128
fi
printf 'accuracy after %s epochs: 1 rank %s%%, 2 ranks %s%%, difference %.2f points\n' \
  "$epochs" "${acc[sdk 1 rank(s)]}" "${acc[sdk 2 rank(s)]}" "$(echo "${acc[sdk 2 rank(s)]} - ${acc[sdk 1 rank(s)]}" | bc)"
