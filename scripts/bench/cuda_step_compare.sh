#!/usr/bin/env bash
# The worker SDK's LibTorch training step against PyTorch's Python one on a GPU: examples/ddp_bench (C++)
# and the shared peer's CNN (../shared/peers/py_ddp_bench.py, its Net) trained the same way on cuda:0:
# world 1, batch 64, synthetic data, SGD(0.01, momentum 0.5), one CPU thread, 10 warm-up steps, then
# STEPS timed between two device synchronisations. Alternates the two, RUNS times each; prints every
# figure, the medians and the C++/Python ratio. Needs a CUDA build of the SDK (scripts/ci_nccl_gpu.sh).
#
#   scripts/bench/cuda_step_compare.sh [BIN] [PEER]   # env RUNS (5), STEPS (300), PYTHON (python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build-gpu/examples/ddp_bench/ddp_bench}
peer=${2:-../shared/peers/py_ddp_bench.py}
runs=${RUNS:-5}
steps=${STEPS:-300}
py=${PYTHON:-python3}
[[ -x $bin && -f $peer ]] || { echo "need $bin (scripts/ci_nccl_gpu.sh builds it) and $peer" >&2; exit 2; }
python_step() {
  "$py" - "$peer" "$steps" <<'PY'
import importlib.util, sys, time, torch, torch.nn.functional as F
spec = importlib.util.spec_from_file_location("peer", sys.argv[1]); peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)
steps = int(sys.argv[2]); torch.set_num_threads(1); torch.manual_seed(0)
m = peer.Net().cuda(); opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.5)
x = torch.randn(64, 1, 28, 28, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
for i in range(steps + 10):
    if i == 10: torch.cuda.synchronize(); t0 = time.time()
    opt.zero_grad(); F.nll_loss(m(x), y).backward(); opt.step()
torch.cuda.synchronize()
print(f"{steps / (time.time() - t0):.2f}")
PY
}
cpp=() pyr=()
for ((i = 1; i <= runs; i++)); do
  c=$(BENCH_DEVICE=cuda "$bin" 1 "$steps" | sed -n 's/.*: \([0-9.]*\) steps\/s.*/\1/p')
  p=$(python_step)
  echo "run $i: C++ SDK $c steps/s, Python $p steps/s"
  cpp+=("$c") pyr+=("$p")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mc=$(median "${cpp[@]}") mp=$(median "${pyr[@]}")
echo "median: C++ SDK $mc steps/s, Python $mp steps/s, ratio $(awk -v a="$mc" -v b="$mp" 'BEGIN {printf "%.2f", a/b}')"
