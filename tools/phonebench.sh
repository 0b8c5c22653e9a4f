#!/usr/bin/env bash
# A/B benchmark of the phone kernels against the ones they replace
# (kernels' BenchmarkPhoneGEMV, BenchmarkAttentionSplitDecode and
# BenchmarkPhoneGEMM): each
# round runs every "old" and "new" sub-benchmark in alternation, each in
# its own process, and prints the benchmark line (ns/op and cpu-ms/op, the
# device threads' CPU time per launch, which waiting for a core on a shared
# machine does not inflate) with the 1-minute load average.
# Usage: tools/phonebench.sh [rounds, default 3] [benchtime, default 10x]
#        [benchmark pattern ... (default: all of them)]
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh
rounds=${1:-3}
bt=${2:-10x}
shift $(( $# < 2 ? $# : 2 ))
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" ./kernels/
pats=(
  '^BenchmarkPhoneGEMV$/^4096x4096$/^e0m4$'
  '^BenchmarkPhoneGEMV$/^11008x4096$/^e0m4$'
  '^BenchmarkPhoneGEMV$/^4096x4096$/^f16$'
  '^BenchmarkAttentionSplitDecode$'
  '^BenchmarkPhoneGEMM$/^64x2048x2048$/^e0m4$'
  '^BenchmarkPhoneGEMM$/^64x2048x2048$/^f16$'
)
if [ $# -gt 0 ]; then pats=("$@"); fi
for r in $(seq "$rounds"); do
  for p in "${pats[@]}"; do
    for v in old new; do
      load=$(cut -d' ' -f1 /proc/loadavg)
      line=$("$bin" -test.run '^$' -test.bench "$p/^$v\$" -test.benchtime "$bt" 2>&1 | grep -E '^Benchmark' | tail -1)
      echo "round $r load $load $line"
    done
  done
done
