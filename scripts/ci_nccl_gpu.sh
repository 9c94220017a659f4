#!/usr/bin/env bash
# The worker SDK on a GPU machine that has PyTorch (its CUDA LibTorch, NCCL) and CMake but not the launcher's
# dependencies: builds worker_sdk on its own (with the examples and the SDK tests) against the LibTorch of
# `python3 -c 'import torch'`, then runs the SDK tests (sdk_cuda and sdk_nccl included), the DDP benchmark on
# CUDA and Fashion-MNIST, world size 1, and prints what it saw: device, NCCL, step time, accuracy.
#
#   scripts/ci_nccl_gpu.sh                 # from the repo root, on the GPU machine
#   scripts/ci_nccl_gpu.sh --pack          # here (Debian): copy doctest.h and Fashion-MNIST into build-gpu-deps/
#                                          # for machines without them (carry that folder along, ~31 MB)
# Environment: PYTHON (python3), BUILD (build-gpu), RAW_NCCL=1 (the SDK's own NCCL group instead of
# ProcessGroupNCCL), EPOCHS (1), STEPS (300, benchmark), DOCTEST_INCLUDE_DIR, FASHION_MNIST_DIR, TORCH_PREFIX
# (a LibTorch CMake prefix instead of torch.utils.cmake_prefix_path). Logs go to $OUT/ci_nccl_gpu when $OUT is
# set, else $BUILD/logs. Exit code: 0 when every stage passed, 1 when one failed, 2 when one could not run.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$(pwd)
deps="$repo/build-gpu-deps"

if [[ ${1:-} == --pack ]]; then
  mkdir -p "$deps/doctest" "$deps/fashion-mnist"
  cp /usr/include/doctest/doctest.h "$deps/doctest/" &&
    cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$deps/fashion-mnist/" &&
    du -sh "$deps" && exit 0
  echo "pack: needs doctest-dev and dataset-fashion-mnist installed" >&2
  exit 1
fi

PYTHON=${PYTHON:-python3}
BUILD=${BUILD:-build-gpu}
EPOCHS=${EPOCHS:-1}
STEPS=${STEPS:-300}
logs=${OUT:+$OUT/ci_nccl_gpu}
logs=${logs:-$BUILD/logs}
mkdir -p "$logs"
status=0
declare -a summary

note() { printf '\n== %s\n' "$*"; }
# stage NAME CMD...: runs CMD with its output in $logs/NAME.log, shows the tail on failure, records the result.
stage() {
  local name=$1
  shift
  local t0=$SECONDS rc=0
  "$@" >"$logs/$name.log" 2>&1 || rc=$?
  if [[ $rc -eq 0 ]]; then
    summary+=("PASS $name ($((SECONDS - t0)) s)")
    return 0
  fi
  summary+=("FAIL $name (exit $rc, $((SECONDS - t0)) s, log $logs/$name.log)")
  echo "-- $name failed (exit $rc); last lines:"
  tail -n 40 "$logs/$name.log"
  status=1
  return 1
}
skip() {
  summary+=("SKIP $1: $2")
  [[ $status -eq 0 ]] && status=2
}

note "machine"
date -u
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
"$PYTHON" - <<'EOF' | tee "$logs/torch.txt" || { echo "no PyTorch for $PYTHON"; exit 2; }
import torch
cuda = torch.cuda.is_available()
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuda available: {cuda}")
if cuda:
    print(f"device 0: {torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} device(s)")
    print("NCCL (torch):", ".".join(map(str, torch.cuda.nccl.version())))
print("cxx11 abi:", torch._C._GLIBCXX_USE_CXX11_ABI)
EOF

# CMake prefixes: LibTorch, and pip's NCCL and CUDA runtime (headers and libraries for the raw NCCL path).
prefix=${TORCH_PREFIX:-$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')}
for pkg in nccl cuda_runtime; do
  dir=$("$PYTHON" -c "import nvidia.$pkg, os; print(list(nvidia.$pkg.__path__)[0])" 2>/dev/null) && prefix="$prefix;$dir"
done
doctest_dir=${DOCTEST_INCLUDE_DIR:-}
[[ -z $doctest_dir && -f $deps/doctest/doctest.h ]] && doctest_dir=$deps
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
raw=OFF
[[ ${RAW_NCCL:-0} == 1 ]] && raw=ON

note "configure ($BUILD, raw NCCL forced: $raw)"
if ! DOCTEST_INCLUDE_DIR=$doctest_dir stage configure cmake -S worker_sdk -B "$BUILD" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON -DCMAKE_PREFIX_PATH="$prefix" -DDDPRUN_SDK_FORCE_RAW_NCCL=$raw; then
  grep -qi "cuda" "$logs/configure.log" &&
    echo "hint: PyTorch's CMake config for a CUDA LibTorch needs the CUDA toolkit (nvcc); set CUDA_HOME or CUDACXX"
  printf '%s\n' "${summary[@]}"
  exit 1
fi
grep -E "ddprun_sdk|Torch|CUDA|NCCL" "$logs/configure.log" | grep -v "^--   " | head -n 20
cache="$BUILD/CMakeCache.txt"
echo "ProcessGroupNCCL: $(grep -E '^DDPRUN_SDK_HAVE_C10D_NCCL' "$cache" | cut -d= -f2)" \
  "libnccl for the raw path: $(grep -E '^DDPRUN_SDK_NCCL_LIBRARY' "$cache" | cut -d= -f2)"

note "build"
stage build cmake --build "$BUILD" -j "$(nproc)" || { printf '%s\n' "${summary[@]}"; exit 1; }

note "SDK tests"
if [[ -x $BUILD/tests/worker_sdk/sdk_test ]]; then
  stage ctest ctest --test-dir "$BUILD" -L sdk --output-on-failure -j 4 --timeout 600
  grep -E "tests passed|Test +#|Skipped|Not Run" "$logs/ctest.log" | sed 's/^ *//'
  # sdk_cuda passes trivially without a GPU; its own words say which case ran.
  "$BUILD/tests/worker_sdk/sdk_test" --test-suite=cuda 2>&1 | grep -E "MESSAGE|test cases" | head -n 3
else
  skip ctest "no doctest: run '$0 --pack' on a Debian machine and carry build-gpu-deps, or set DOCTEST_INCLUDE_DIR"
fi
if [[ -x $BUILD/tests/worker_sdk/sdk_nccl_test ]]; then
  "$BUILD/tests/worker_sdk/sdk_nccl_test" 2>&1 | grep -E "MESSAGE|libnccl" | head -n 2
fi

device=cpu
grep -q "cuda available: True" "$logs/torch.txt" && device=cuda
note "DDP benchmark on $device (world 1, the seeds' CNN, batch 64, $STEPS steps)"
if [[ -x $BUILD/examples/ddp_bench/ddp_bench ]]; then
  BENCH_DEVICE=$device BENCH_PHASES=1 stage ddp_bench "$BUILD/examples/ddp_bench/ddp_bench" 1 "$STEPS"
  grep -E "steps/s|phases" "$logs/ddp_bench.log"
else
  skip ddp_bench "not built (zlib missing?)"
fi

note "Fashion-MNIST (world 1, $EPOCHS epoch(s))"
data=${FASHION_MNIST_DIR:-}
for d in "$data" /usr/share/datasets/fashion-mnist "$deps/fashion-mnist"; do
  [[ -n $d && -f $d/train-images-idx3-ubyte.gz ]] && { data=$d; break; }
done
if [[ ! -x $BUILD/examples/fashion_mnist/fashion_mnist ]]; then
  skip fashion_mnist "not built (zlib missing?)"
elif [[ -z $data || ! -f $data/train-images-idx3-ubyte.gz ]]; then
  skip fashion_mnist "no data: set FASHION_MNIST_DIR, or '$0 --pack' on Debian and carry build-gpu-deps"
else
  # The example trains where its model lives; it reports no device, so say what its source does.
  if grep -q "pg->device()" examples/fashion_mnist/main.cpp; then where="cuda:0 when available"; else where="CPU (the example does not move its model to pg->device())"; fi
  echo "data: $data; the example trains on $where"
  t0=$SECONDS
  stage fashion_mnist "$BUILD/examples/fashion_mnist/fashion_mnist" --nproc 1 --epochs "$EPOCHS" --log-every 200 \
    --data-dir "$data" --checkpoint-dir "$BUILD/fashion-ckpt"
  grep -E "throughput|accuracy" "$logs/fashion_mnist.log" | tail -n 4
  echo "wall time: $((SECONDS - t0)) s"
fi

note "summary"
printf '%s\n' "${summary[@]}"
exit $status
