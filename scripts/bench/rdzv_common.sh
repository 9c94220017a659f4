# Sourced by the rendezvous benchmarks (rdzv_scale.sh, rdzv_steady.sh) after they set `name`, `build` and
# `sizes`: the server and load generator built, enough descriptors for the largest size, a work directory
# removed at exit, a fresh token, and `median`.
server=$build/rendezvous/ddprun-rendezvous
loadgen=$build/rendezvous/ddprun-rdzv-loadgen
for exe in "$server" "$loadgen"; do
  [ -x "$exe" ] || { echo "$name: $exe not built (ninja -C $build ddprun-rendezvous ddprun-rdzv-loadgen)" >&2; exit 2; }
done

# Each side holds one socket per agent, plus a few: 10k agents need ~10k descriptors per process.
max=${sizes[0]}
for n in "${sizes[@]}"; do [ "$n" -gt "$max" ] && max=$n; done
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" -lt $((max + 64)) ]; then
  echo "$name: ulimit -n is $(ulimit -n); $((max + 64)) descriptors needed per process" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
