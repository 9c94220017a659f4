#!/usr/bin/env bash
# ddprun itself on a GPU machine with PyTorch (no apt there): Python workers on NCCL under the launcher.
#   scripts/gpu_launch_check.sh --pack   # here: ddprun (stripped) and the libraries it needs into build-gpu-deps/launch
#   scripts/gpu_launch_check.sh          # there, carrying build-gpu-deps
# Checks: --nproc-per-node gpu starts one worker per visible GPU, which trains with NCCL and exits 0; a rank that
# raises mid-training ends the job with its exception named; two ranks sharing one GPU (NCCL refuses that) end
# the job instead of hanging. Prints each exit code and wall time; exit 1 when one is not what it should be.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
dir=build-gpu-deps/launch
if [[ ${1:-} == --pack ]]; then
  mkdir -p "$dir"
  strip -o "$dir/ddprun" build/launcher/ddprun || exit 1
  for lib in $(ldd build/launcher/ddprun | awk '/sodium|munge/ {print $3}'); do cp -L "$lib" "$dir/"; done
  ls -la "$dir"
  exit 0
fi
export LD_LIBRARY_PATH=$PWD/$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ddprun=$PWD/$dir/ddprun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/train.py" <<'PY'
import os, sys, torch, torch.distributed as dist
rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local % torch.cuda.device_count())
dist.init_process_group("nccl", device_id=torch.device("cuda", local % torch.cuda.device_count()))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 10).cuda())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(50):
    if os.environ.get("FAIL_AT") == str(step) and rank == int(os.environ.get("FAIL_RANK", "0")):
        raise RuntimeError(f"planned failure at step {step}")
    loss = model(torch.randn(32, 64, device="cuda")).square().mean()
    opt.zero_grad(); loss.backward(); opt.step()
t = torch.ones(1, device="cuda") * (rank + 1); dist.all_reduce(t)
print(f"rank {rank}/{os.environ['WORLD_SIZE']} local {local} cuda:{torch.cuda.current_device()} "
      f"sum {t.item():.0f} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
PY
status=0
check() {  # check NAME EXPECTED_RC ARGS...
  local name=$1 want=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s%N)
  "$@" >"$work/$name.log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  printf '== %s: exit %d (want %s), %d ms\n' "$name" "$rc" "$want" $(((t1 - t0) / 1000000))
  grep -E "rank [0-9]+/|ddprun:|Error|error" "$work/$name.log" | grep -v "^\[W" | head -n 12
  [[ $want == nonzero && $rc -ne 0 ]] || [[ $rc == "$want" ]] || status=1
}
nvidia-smi --query-gpu=name --format=csv,noheader
check gpu_count 0 "$ddprun" --standalone --nproc-per-node gpu python3 "$work/train.py"
check rank_raises nonzero env FAIL_AT=20 "$ddprun" --standalone --nproc-per-node gpu python3 "$work/train.py"
check shared_gpu nonzero timeout 300 "$ddprun" --standalone --nproc-per-node 2 --hang-initial-timeout 60 \
  --hang-timeout 30 env FAIL_RANK=9 python3 "$work/train.py"
exit $status
