#!/usr/bin/env bash
# Long protocol fuzzing run under AddressSanitizer + UndefinedBehaviorSanitizer (any report aborts).
#
#   scripts/fuzz_rendezvous.sh [INPUTS] [SEED]      (defaults: 10000000 inputs, seed 1)
# Builds only the rendezvous fuzzer, in build-rdzv-asan/ (BUILD_DIR=... to change), then runs it with no
# time limit. CI runs a 10 s version of the same program (ctest -R rendezvous.fuzz).
set -euo pipefail

inputs=${1:-10000000}
seed=${2:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-rdzv-asan}
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON -DDDPRUN_BUILD_SDK=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$build" --target rendezvous_fuzz -j"${JOBS:-2}"

export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "fuzz_rendezvous: $build/tests/rendezvous/rendezvous_fuzz --seed $seed --inputs $inputs --seconds 1e9"
exec "$build/tests/rendezvous/rendezvous_fuzz" --seed "$seed" --inputs "$inputs" --seconds 1e9
