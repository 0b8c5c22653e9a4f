#!/usr/bin/env bash
# Runs tlite's linux/arm64 build under emulation (qemu-user) on an arm64
# OpenCL stack (Debian's PoCL and ICD loader for arm64): tl devices, tl run
# of a small model against its PyTorch reference, the opencl runtime's tests
# and the kernel tests of a few families.
#
#   tools/arm64-smoke.sh [--cgo]     (--cgo: the cgo build; default cgo-free)
#
# Needs qemu-user-static (and gcc-aarch64-linux-gnu for --cgo and for
# PoCL's kernel linking), which tools/setup.sh installs, and root or
# unprivileged user namespaces (see below).
#
# Why not simply `apt-get install pocl-opencl-icd:arm64`: Debian's arm64
# PoCL depends on clang-15:arm64 and binutils:arm64, which are not co-installable
# with their amd64 versions, so multiarch would remove the host's own PoCL
# and compiler. Instead the arm64 packages (PoCL's dependency closure) are
# unpacked into a private root, $TLITE_ARM64_ROOT (default
# ~/.cache/tlite/arm64-root), and qemu runs with -L on it. Two things
# qemu's path redirection does not cover are fixed inside a private mount
# namespace (unshare -m), so the host is not changed:
#   - PoCL checks its kernel library with faccessat, which qemu does not
#     redirect: the root's /usr/share/pocl is bind-mounted over the host's.
#   - PoCL links each kernel by running /usr/bin/ld, which the host kernel
#     runs natively (no binfmt here): a wrapper that calls the host's
#     aarch64-linux-gnu-ld with the root as sysroot is bind-mounted over it.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh

cgo_flag=()
[ "${1:-}" = --cgo ] && cgo_flag=(--cgo)
root=${TLITE_ARM64_ROOT:-$HOME/.cache/tlite/arm64-root}
# The emulated PoCL's and tlite's kernel caches, apart from the host's:
# delete it to time a cold run (as on a fresh CI machine).
cache=${TLITE_ARM64_CACHE:-$HOME/.cache/tlite/arm64-cache}
# Kernel tests run under emulation, where each family's first build compiles
# under emulated LLVM (tens of seconds each): the families the resnet run
# does not reach (it covers conv, matmul, pool and element-wise chains).
kernel_tests=${TLITE_ARM64_KERNEL_TESTS:-'^Test(Softmax|RMSNorm)$'}
t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 ))s] $*"; }

for tool in qemu-aarch64-static aarch64-linux-gnu-ld; do
  command -v $tool >/dev/null || { echo "arm64-smoke: $tool missing: run tools/setup.sh" >&2; exit 1; }
done

mkdir -p "$cache"

# 1. The arm64 root: PoCL's and the ICD loader's dependency closure.
if [ ! -e "$root/.complete" ]; then
  step "unpacking the arm64 OpenCL stack into $root"
  dpkg --print-foreign-architectures | grep -qx arm64 || {
    echo "arm64-smoke: dpkg has no arm64 architecture: run tools/setup.sh (dpkg --add-architecture arm64; apt-get update)" >&2; exit 1; }
  debs=$(mktemp -d)
  names=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances pocl-opencl-icd:arm64 ocl-icd-libopencl1:arm64 |
      grep -v '^[ <]' | sed 's/:arm64$//' | sort -u)
  # Architecture-independent packages have no :arm64 candidate: fetch those
  # by their plain name.
  pkgs=($(apt-cache policy $(printf '%s:arm64 ' $names) 2>/dev/null | awk '
    /^[^ ].*:$/ { name = substr($0, 1, length($0) - 1); next }
    /^  Candidate:/ { if ($2 == "(none)") sub(/:arm64$/, "", name); print name }'))
  (cd "$debs" && apt-get download -q "${pkgs[@]}" >/dev/null 2>&1) || {
    echo "arm64-smoke: apt-get download of the arm64 packages failed" >&2; exit 1; }
  rm -rf "$root.tmp" && mkdir -p "$root.tmp"
  for f in "$debs"/*.deb; do dpkg-deb -x "$f" "$root.tmp"; done
  for f in lib/ld-linux-aarch64.so.1 usr/lib/aarch64-linux-gnu/libOpenCL.so.1 etc/OpenCL/vendors/pocl.icd; do
    [ -e "$root.tmp/$f" ] || { echo "arm64-smoke: the unpacked arm64 root lacks $f" >&2; exit 1; }
  done
  rm -rf "$debs" "$root" && mv "$root.tmp" "$root" && touch "$root/.complete"
fi

# 2. The cross build: tl and the test binaries.
step "cross-building (tools/cross-arm64.sh ${cgo_flag[*]:-})"
tools/cross-arm64.sh "${cgo_flag[@]}" --tests ./opencl ./kernels
bin=$PWD/bin/linux-arm64

# 3. Everything else runs inside a private mount namespace.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/ld" <<EOF
#!/bin/sh
# /usr/bin/ld as PoCL (emulated) runs it: the host's aarch64 linker, with the
# paths PoCL passes (-L dirs, input files) taken inside the arm64 root.
n=\$#
while [ \$n -gt 0 ]; do
  a=\$1; shift; n=\$((n-1))
  case \$a in
    -L/*) [ -e "$root\${a#-L}" ] && a="-L$root\${a#-L}" ;;
    /*) [ -e "$root\$a" ] && a="$root\$a" ;;
  esac
  set -- "\$@" "\$a"
done
exec $(command -v aarch64-linux-gnu-ld) --sysroot="$root" "\$@"
EOF
chmod +x "$work/ld"

cat > "$work/run.sh" <<EOF
set -euo pipefail
mount --bind "$root/usr/share/pocl" /usr/share/pocl
mount --bind "$work/ld" /usr/bin/ld
export XDG_CACHE_HOME="$cache"
q() { qemu-aarch64-static -L "$root" "\$@"; }
step() { echo "== [\$(( \$(date +%s) - $t0 ))s] \$*"; }
step "tl devices (arm64 PoCL)"
q "$bin/tl" devices
step "tl run testdata/models/resnet (compiles its kernels under emulation)"
q "$bin/tl" run testdata/models/resnet/model.onnx --input pixel_values=testdata/models/resnet/ref/input.pixel_values.npy --out "$work/out"
step "opencl runtime tests"
(cd opencl && q "$bin/opencl.test" -test.count=1)
step "kernel tests matching $kernel_tests"
(cd kernels && q "$bin/kernels.test" -test.count=1 -test.v -test.run '$kernel_tests' | grep -E '^(--- |ok|PASS|FAIL)')
EOF
if [ "$(id -u)" = 0 ]; then ns=(unshare -m); else ns=(unshare -m -r); fi
if ! "${ns[@]}" true 2>/dev/null; then
  echo "arm64-smoke: cannot make a private mount namespace (${ns[*]}): run as root, or enable unprivileged user namespaces" >&2
  exit 1
fi
"${ns[@]}" bash "$work/run.sh"

step "comparing tl run's logits with the PyTorch reference"
/usr/bin/python3 - "$work/out/logits.npy" testdata/models/resnet/ref/output.logits.npy <<'EOF'
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
if got.shape != want.shape:
    sys.exit(f"arm64 logits shape {got.shape}, reference {want.shape}")
err = float(np.abs(got - want).max())
tol = 1e-4 * max(1.0, float(np.abs(want).max()))
print(f"max |arm64 - reference| = {err:.3g} (tolerance {tol:.3g})")
sys.exit(0 if err <= tol else "arm64 output differs from the reference")
EOF
step "arm64 smoke test passed"
