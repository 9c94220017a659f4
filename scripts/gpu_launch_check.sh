#!/usr/bin/env bash
# ddprun itself on a GPU machine with PyTorch (no apt there): Python workers on NCCL under the launcher.
#   scripts/gpu_launch_check.sh --pack   # here: ddprun (stripped) and the libraries it needs into build-gpu-deps/launch
#                                        (libsodium, libmunge, OpenSSL: that machine has no apt)
#   scripts/gpu_launch_check.sh          # there, carrying build-gpu-deps
# Checks: --nproc-per-node gpu starts one worker per visible GPU, which trains with NCCL and exits 0; a rank that
# raises mid-training ends the job with its exception named; two ranks sharing one GPU (NCCL refuses that) end
# the job instead of hanging; a rank that hangs after NCCL collectives (--hang-timeout) ends the job with 78 and its
# NCCL Flight Recorder dump in --log-dir, which torch can read back. Prints each exit code and wall time; exit 1
# when one is not what it should be. With $OUT set, the dump and the hang's log are copied there.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
dir=build-gpu-deps/launch
if [[ ${1:-} == --pack ]]; then
  mkdir -p "$dir"
  strip -o "$dir/ddprun" build/launcher/ddprun || exit 1
  for lib in $(ldd build/launcher/ddprun | awk '/sodium|munge|libssl|libcrypto/ {print $3}'); do cp -L "$lib" "$dir/"; done
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
# A real NCCL Flight Recorder: 20 collectives, then a silent rank. ddprun must ask the recorder for its dump
# before the kill (the FIFO contract in agent/flight_recorder.hpp), keep it in --log-dir, and exit 78.
cat >"$work/fr.py" <<'PY'
import os, sys, time, torch, torch.distributed as dist
sys.path.insert(0, os.environ["HELPER_DIR"])
import ddprun_heartbeat as hb
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
t = torch.ones(1024, device="cuda")
for step in range(20):
    dist.all_reduce(t); torch.cuda.synchronize(); hb.beat(step)
print(f"rank {os.environ['RANK']}/{os.environ['WORLD_SIZE']} 20 all_reduces done, now silent", flush=True)
time.sleep(600)
PY
check hang_flight_recorder 78 timeout 300 env HELPER_DIR="$PWD/python" "$ddprun" --standalone --nproc-per-node 1 \
  --hang-timeout 5 --hang-initial-timeout 120 --log-dir "$work/fr-logs" python3 "$work/fr.py"
grep -E "hung|Flight Recorder|stacks" "$work/hang_flight_recorder.log" | head -n 8
dump=$(find "$work/fr-logs" -name 'nccl_trace_rank_0' | head -n 1)
if [[ -z $dump ]]; then
  echo "== flight recorder dump: none in --log-dir"; find "$work/fr-logs" | head -n 30; status=1
else
  python3 - "$dump" <<'PY' || status=1
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
entries = d.get("entries", [])
names = [e.get("profiling_name") for e in entries]
print(f"== flight recorder dump: {sys.argv[1].split('fr-logs/')[-1]}, version {d.get('version')}, "
      f"{len(entries)} entries, first {names[:1]}, last {names[-1:]}, states {sorted({e.get('state') for e in entries})}")
assert len(entries) >= 20, "fewer entries than collectives run"
PY
  stacks=$(find "$work/fr-logs" -name hang_stacks.txt | head -n 1)
  grep -A1 "NCCL Flight Recorder" "$stacks"
  grep -q "no dump written in time" "$stacks" && { echo "== the capture gave up on the dump"; status=1; }
  [[ -n ${OUT:-} ]] && cp "$dump" "$stacks" "$work/hang_flight_recorder.log" "$OUT/"
fi
exit $status
