#!/usr/bin/env bash
# Launch of 8 × /bin/true on a GPU machine (PyTorch 2.x and its torchrun there, no apt): the floor (xargs -P 8),
# ddprun (the stripped binary of scripts/gpu_launch_check.sh --pack) and that machine's torchrun, interleaved,
# RUNS times each (torchrun: TORCHRUN_RUNS, it takes seconds). Prints each median in ms and the ratios.
#   scripts/gpu_launch_check.sh --pack     # here
#   scripts/bench/gpu_launch_compare.sh    # there, carrying build-gpu-deps
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
dir=build-gpu-deps/launch
export LD_LIBRARY_PATH=$PWD/$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ddprun=$PWD/$dir/ddprun
[ -x "$ddprun" ] || { echo "gpu_launch_compare: no $ddprun (scripts/gpu_launch_check.sh --pack here first)" >&2; exit 2; }
python3 -c 'import torch.distributed.run' 2>/dev/null ||
  { echo "gpu_launch_compare: python3 has no torch.distributed.run here: nothing to compare with" >&2; exit 2; }
runs=${RUNS:-15}
torchrun_runs=${TORCHRUN_RUNS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ms() {  # ms FILE CMD...: appends the command's wall time in ms to FILE
  local file=$1 t0 t1
  shift
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000)) >>"$file"  # microseconds
}
for i in $(seq "$runs"); do
  ms "$work/floor" sh -c 'seq 8 | xargs -P 8 -n 1 sh -c /bin/true'
  ms "$work/ddprun" env TMPDIR="$work" "$ddprun" --standalone --nproc-per-node 8 /bin/true
  if [ "$i" -le "$torchrun_runs" ]; then
    ms "$work/torchrun" env TMPDIR="$work" python3 -m torch.distributed.run --standalone --nproc_per_node 8 \
      --no_python /bin/true
  fi
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2; printf "%.1f", m / 1000}'; }
f=$(median "$work/floor") d=$(median "$work/ddprun") t=$(median "$work/torchrun")
echo "machine: $(nproc) cores, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "launch of 8 x /bin/true, median ms: floor (xargs -P 8) $f ($runs runs), ddprun $d ($runs), torchrun $t ($torchrun_runs)"
awk -v f="$f" -v d="$d" -v t="$t" 'BEGIN {printf "ddprun / floor %.2fx; torchrun / ddprun %.0fx\n", d / f, t / d}'
