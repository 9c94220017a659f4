# Sourced by the single-node launcher benchmarks (launch.sh teardown.sh idle.sh output.sh): sets
#   here    this directory
#   ddprun  BUILD/launcher/ddprun, worker  BUILD/tests/bin/test_worker (absolute; exits 2 when not built)
#   peer    torchrun 1.13 for Python 3.11 (shared/peers/torchrun311.py next to the checkout, else /work/shared/...)
# from $bench (the script's name, for messages) and $build.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ddprun=$(realpath -m "$build/launcher/ddprun")
worker=$(realpath -m "$build/tests/bin/test_worker")
peer=$here/../../../shared/peers/torchrun311.py
[ -f "$peer" ] || peer=/work/shared/peers/torchrun311.py
for exe in "$ddprun" "$worker"; do
  [ -x "$exe" ] || { echo "$bench: $exe not built (cmake --build $build --target ddprun test_worker)" >&2; exit 2; }
done
