# Sourced by the rendezvous benchmarks (rdzv_scale.sh, rdzv_steady.sh) after they set `name`, `build` and
# `sizes`: the server and load generator built, enough descriptors for the largest size (or `fits`), a work
# directory removed at exit, a fresh token, and `median`.
server=$build/rendezvous/ddprun-rendezvous
loadgen=$build/rendezvous/ddprun-rdzv-loadgen
for exe in "$server" "$loadgen"; do
  [ -x "$exe" ] || { echo "$name: $exe not built (ninja -C $build ddprun-rendezvous ddprun-rdzv-loadgen)" >&2; exit 2; }
done

# Each side holds one socket per agent, plus a few: 10k agents need ~10k descriptors per process. The hard limit
# is raised too where that is allowed (root with CAP_SYS_RESOURCE, up to /proc/sys/fs/nr_open). A script that
# sets skip_unfit asks `fits N` per size instead of stopping here.
max=${sizes[0]}
for n in "${sizes[@]}"; do [ "$n" -gt "$max" ] && max=$n; done
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt $((max + 64)) ]; then
  ulimit -Hn $((max + 64)) 2>/dev/null || true
fi
ulimit -n "$(ulimit -Hn)"
fits() { [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge $(($1 + 64)) ]; }
if ! fits "$max" && [ -z "${skip_unfit:-}" ]; then
  echo "$name: ulimit -n is $(ulimit -n); $((max + 64)) descriptors needed per process" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
