#!/usr/bin/env bash
# compare.sh: tlite against ONNX Runtime on a list of models, run alternately
# (tlite, ORT, tlite, ORT, ...) for a number of rounds so both see the same
# machine load, then a table of each engine's median of the rounds'
# medians, the time ratio tlite / ORT with the smallest and largest
# per-round ratio, and the load average before and after.
#
# Usage: tools/ortbench/compare.sh [-n rounds] [-r runs] [--threads N] [--tl path/to/tl] \
#            MODEL.onnx:INPUT=1x3x224x224[,INPUT2=...] ...
# A model with static input shapes may be given without ":...". tl is built
# from this checkout when --tl is not given. Needs node and
# tools/ortbench/node_modules (see bench.js).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=3 runs=10 threads=2 tl=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) rounds=$2; shift 2 ;;
    -r) runs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --tl) tl=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "compare.sh: no models (-h for usage)" >&2; exit 2; }
if [ -z "$tl" ]; then
  . "$root/tools/env.sh"
  tl=$(mktemp -d)/tl
  (cd "$root" && go build -o "$tl" ./tools/tl)
fi
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "nan"} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }
field() { sed -n "s/^  \"$1\": \([0-9.eE+-]*\),*$/\1/p" | head -1; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %-26s %10s %10s %8s %15s\n' model shapes "tlite ms" "ORT ms" ratio "ratio min-max"
for spec in "$@"; do
  model=${spec%%:*} shapes=""
  [ "$model" != "$spec" ] && shapes=${spec#*:}
  args=()
  IFS=, read -ra parts <<<"$shapes"
  for p in "${parts[@]}"; do [ -n "$p" ] && args+=(--shape "$p"); done
  tls=() orts=() ratios=()
  for ((i = 0; i < rounds; i++)); do
    t=$("$tl" bench "$model" "${args[@]}" -r "$runs" --json 2>/dev/null | field median_ms)
    o=$(node "$here/bench.js" "$model" "${args[@]}" -r "$runs" --threads "$threads" --json 2>/dev/null | field median_ms)
    [ -n "$t" ] && [ -n "$o" ] || { echo "compare.sh: $model: a run failed (tlite '$t', ORT '$o')" >&2; continue 2; }
    tls+=("$t") orts+=("$o") ratios+=("$(awk -v a="$t" -v b="$o" 'BEGIN {print a / b}')")
  done
  tm=$(printf '%s\n' "${tls[@]}" | median) om=$(printf '%s\n' "${orts[@]}" | median)
  rmin=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1) rmax=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
  name=$(basename "$(dirname "$model")")/$(basename "$model")
  printf '%-28s %-26s %10.2f %10.2f %7.2fx %7.2f-%-7.2f\n' "$name" "${shapes:-static}" "$tm" "$om" \
    "$(awk -v a="$tm" -v b="$om" 'BEGIN {print a / b}')" "$rmin" "$rmax"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
