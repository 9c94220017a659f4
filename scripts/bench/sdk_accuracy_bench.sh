#!/usr/bin/env bash
# Fashion-MNIST test accuracy after 2 epochs with the worker SDK: 1 rank vs 2 ranks at the same global
# batch (64 = 1 x 64 = 2 x 32, so both take the same number of optimizer steps with the same lr), both
# started through embedded spawn. Prints each epoch line and the 2-rank minus 1-rank difference.
# Compare with the data set's published "2 Conv+pooling" baselines (README of dataset-fashion-mnist:
# 0.876 and 0.916).
# usage: scripts/bench/sdk_accuracy_bench.sh [fashion_mnist binary] (default build-sdk/examples/...)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build-sdk/examples/fashion_mnist/fashion_mnist}
epochs=${EPOCHS:-2}
declare -A acc
for n in 1 2; do
  start=$(date +%s.%N)
  out=$(OMP_NUM_THREADS=1 "$bin" --nproc "$n" --epochs "$epochs" --batch-size $((64 / n)) --lr 0.01 --seed 1 \
        --threads 1 --log-every 100000)
  end=$(date +%s.%N)
  echo "$out" | grep '^epoch' | sed "s/^/ranks $n: /"
  acc[$n]=$(echo "$out" | grep '^epoch' | tail -1 | sed -E 's/.*accuracy ([0-9.]+)%.*/\1/')
  printf 'ranks %s: %.1f s wall\n' "$n" "$(echo "$end - $start" | bc)"
done
printf 'accuracy after %s epochs: 1 rank %s%%, 2 ranks %s%%, difference %.2f points\n' \
  "$epochs" "${acc[1]}" "${acc[2]}" "$(echo "${acc[2]} - ${acc[1]}" | bc)"
