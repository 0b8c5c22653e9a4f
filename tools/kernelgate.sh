#!/usr/bin/env bash
# The phone-GPU kernel gate (issue 14): records every (source, options) pair
# the kernel launchers build, by running the kernel tests with a build dump
# under each device profile (cpu, cpu-fp16, gpu, gpu-fp16; the tests pass on
# PoCL in all four, so the GPU variants run here too), then compiles each
# pair with clang for spir64 at OpenCL C 1.2/2.0/3.0 with fp16 on and off,
# validates the SPIR-V, checks kernel parameter limits and the register use
# of the GPU kernel set (tools/kernelgate/main.go says how). Known failures
# are in tools/kernelgate.allow; a new failure or a stale entry fails.
#
# Needs (Debian 12): clang-15 llvm-15 llvm-spirv-15 spirv-tools libclc-15.
# Usage: tools/kernelgate.sh [kernelgate flags, e.g. -json or -keep]
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh
dump=$(mktemp -d)
trap 'rm -rf "$dump"' EXIT
# Build the tool first: a missing compiler is reported before the tests run.
go build -o "$dump/kernelgate" ./tools/kernelgate
"$dump/kernelgate" -tools
for p in cpu cpu-fp16 gpu gpu-fp16; do
  echo "kernelgate: kernel tests under profile $p"
  # go test's default 10-minute limit was passed under the cpu profile on
  # a loaded 2-core machine (a cold PoCL cache builds every program).
  TLITE_KERNEL_DUMP="$dump/builds" TLITE_KERNEL_PROFILE=$p go test -count=1 -timeout 40m ./kernels/ >"$dump/test-$p.log" 2>&1 || {
    cat "$dump/test-$p.log"; echo "kernelgate: kernel tests failed under profile $p"; exit 1; }
done
"$dump/kernelgate" -dump "$dump/builds" -allow tools/kernelgate.allow "$@"
