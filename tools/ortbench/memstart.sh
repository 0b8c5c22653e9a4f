#!/usr/bin/env bash
# Peak memory and start-up time of tlite against ONNX Runtime on one model,
# alternating the two, ROUNDS rounds (issue 13, targets 5 and 6).
#
#   tools/ortbench/memstart.sh MODEL --shape name=1x3x224x224 [--shape ...] \
#       [--rounds 3] [--tl PATH] [--cold] [--threads 2]
#
# Each round runs `tl bench MODEL -r 3 -w 1 --json` and this folder's
# bench.js with the same shapes, each under /usr/bin/time, and records the
# process's peak RSS (time's maximum resident set size), the load time each
# reports (tl: engine.Open; ORT: InferenceSession.create) and tl's first run.
# With --cold every tl round gets an empty cache folder (XDG_CACHE_HOME: the
# OpenCL program cache and PoCL's own), so its first run includes every
# kernel build; ORT has no such cache. Prints medians with min and max, and
# the load average before and after (timings mean little under load).
set -euo pipefail

model="" rounds=3 tl="" cold=0 threads=2
shapes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shapes+=(--shape "$2"); shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --tl) tl="$2"; shift 2 ;;
    --cold) cold=1; shift ;;
    --threads) threads="$2"; shift 2 ;;
    -*) echo "memstart.sh: unknown flag $1" >&2; exit 2 ;;
    *) model="$1"; shift ;;
  esac
done
[ -n "$model" ] || { echo "usage: memstart.sh MODEL --shape name=dims ... [--rounds N] [--tl PATH] [--cold]" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "$tl" ]; then
  tl="$(mktemp -d)/tl"
  (cd "$here/../.." && go build -o "$tl" ./tools/tl)
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "load before: $(uptime)"
for r in $(seq 1 "$rounds"); do
  env=()
  if [ "$cold" = 1 ]; then
    mkdir -p "$work/cache$r"
    env=(XDG_CACHE_HOME="$work/cache$r")
  fi
  env "${env[@]}" /usr/bin/time -f "%M" -o "$work/tl$r.rss" "$tl" bench "$model" "${shapes[@]}" -r 3 -w 1 --json >"$work/tl$r.json"
  /usr/bin/time -f "%M" -o "$work/ort$r.rss" node "$here/bench.js" "$model" "${shapes[@]}" --threads "$threads" -r 3 -w 1 --json >"$work/ort$r.json"
done
echo "load after:  $(uptime)"

python3 - "$work" "$rounds" "$cold" <<'PY'
import json, statistics, sys
work, rounds, cold = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"

def rss(p):
    return int(open(p).read().split()[-1]) / 1024  # KiB -> MiB

rows = {"tl": {"rss": [], "load": [], "first": [], "run": []}, "ort": {"rss": [], "load": [], "run": []}}
for r in range(1, rounds + 1):
    t = json.load(open(f"{work}/tl{r}.json"))
    o = json.load(open(f"{work}/ort{r}.json"))
    rows["tl"]["rss"].append(rss(f"{work}/tl{r}.rss"))
    rows["tl"]["load"].append(t["startup"]["load_ms"])
    rows["tl"]["first"].append(t["startup"]["first_run_ms"])
    rows["tl"]["run"].append(t["median_ms"])
    rows["ort"]["rss"].append(rss(f"{work}/ort{r}.rss"))
    rows["ort"]["load"].append(o["load_ms"])
    rows["ort"]["run"].append(o["median_ms"])

def fmt(xs):
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})"

print(f"{'figure':<28} {'tlite':<22} {'ORT':<22} tlite/ORT (medians)")
for key, name in [("rss", "peak RSS, MiB"), ("load", "load (Open / create), ms"), ("run", "run median, ms")]:
    a, b = rows["tl"][key], rows["ort"][key]
    print(f"{name:<28} {fmt(a):<22} {fmt(b):<22} {statistics.median(a) / statistics.median(b):.2f}")
first = rows["tl"]["first"]
cold_word = "cold cache" if cold else "warm cache"
print(f"{'tl first run (' + cold_word + '), ms':<28} {fmt(first):<22}")
starts = [l + f for l, f in zip(rows["tl"]["load"], first)]
print(f"{'tl open + first run, ms':<28} {fmt(starts):<22}")
PY
