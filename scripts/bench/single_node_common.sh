# Sourced by the single-node launcher benchmarks (launch.sh teardown.sh idle.sh output.sh): sets
#   here    this directory
#   ddprun  BUILD/launcher/ddprun, worker  BUILD/tests/bin/test_worker (absolute; exits 2 when not built)
#   peer    torchrun 1.13 for Python 3.11: $DDPRUN_PEERS/torchrun311.py when set, else shared/peers/ beside the
#           checkout (../shared); none found is said in one line, exit 2
# from $bench (the script's name, for messages) and $build.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ddprun=$(realpath -m "$build/launcher/ddprun")
worker=$(realpath -m "$build/tests/bin/test_worker")
peer=${DDPRUN_PEERS:-$here/../../../shared/peers}/torchrun311.py
# The benchmarks that compare against the peer call this first.
require_peer() {
  [ -f "$peer" ] || { echo "$bench: no $peer: put ../shared beside the checkout or set DDPRUN_PEERS=DIR" >&2; exit 2; }
}
for exe in "$ddprun" "$worker"; do
  [ -x "$exe" ] || { echo "$bench: $exe not built (cmake --build $build --target ddprun test_worker)" >&2; exit 2; }
done
