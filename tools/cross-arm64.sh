#!/usr/bin/env bash
# Cross-builds tl for 64-bit ARM Linux (boards with Mali GPUs, ARM servers,
# phones running a Linux userland) into bin/linux-arm64/tl.
#
#   tools/cross-arm64.sh          no cgo: needs only Go (OpenCL is loaded at run time)
#   tools/cross-arm64.sh --cgo    with cgo, through Debian's gcc-aarch64-linux-gnu
#                                 (launches cross into C once instead of once per OpenCL call)
#   tools/cross-arm64.sh --tests PKG...   also test binaries bin/linux-arm64/<name>.test
#
# For Android use GOOS=android with an NDK compiler instead (README, "ARM and Android").
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh

cgo=0
tests=()
while [ $# -gt 0 ]; do
  case $1 in
    --cgo) cgo=1 ;;
    --tests) shift; tests=("$@"); break ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cross-arm64: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

export GOOS=linux GOARCH=arm64 CGO_ENABLED=$cgo
if [ "$cgo" = 1 ]; then
  export CC=${CC_ARM64:-aarch64-linux-gnu-gcc}
  if ! command -v "$CC" >/dev/null; then
    echo "cross-arm64: $CC not found: apt-get install gcc-aarch64-linux-gnu (tools/setup.sh does), or build without --cgo" >&2
    exit 1
  fi
  # env.sh's flags are for the host compiler.
  unset CGO_CFLAGS CGO_LDFLAGS
fi
out=bin/linux-arm64
mkdir -p "$out"
start=$(date +%s)
go build -o "$out/tl" ./tools/tl
for p in "${tests[@]}"; do
  go test -c -o "$out/$(basename "$p").test" "$p"
done
echo "cross-arm64: built $out/tl${tests:+ and ${#tests[@]} test binaries} (cgo=$cgo) in $(( $(date +%s) - start ))s"
