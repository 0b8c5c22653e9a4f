#!/usr/bin/env bash
# Installs everything tlite needs on Debian 12: PoCL (an OpenCL device on the
# CPU, for machines without a GPU driver) and the OpenCL loader, PyTorch,
# torchvision and ONNX for the export recipes (with OpenBLAS: Debian's torch otherwise runs
# its matmuls on the reference BLAS, ~30x slower, too slow for the training
# recipe), the arm64 cross tools (with the arm64 libc headers, which
# --no-install-recommends would leave out) for tools/cross-arm64.sh and
# tools/arm64-smoke.sh, and a Go new enough for go.mod.
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

GO_VERSION=$(awk '$1 == "go" {print $2; exit}' go.mod)
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
apt_install() {
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# arm64 package lists, for the emulated smoke test's arm64 OpenCL stack
# (which it unpacks into a private root; nothing arm64 is installed).
updated=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "setup: adding the arm64 architecture to dpkg (package lists only)"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  updated=1
fi

need_apt=()
for p in pocl-opencl-icd ocl-icd-libopencl1 clinfo python3-torch python3-torchvision python3-onnx python3-numpy \
  libopenblas0-pthread ca-certificates gcc qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
  clang-15 llvm-15 llvm-spirv-15 spirv-tools libclc-15; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  [ $updated = 1 ] || $SUDO apt-get update -qq
  apt_install "${need_apt[@]}"
fi

# Go: the go command on PATH or in /usr/local/go if it is new enough.
# Otherwise a Go >= 1.21 from Debian (bookworm's own golang-go is 1.19,
# bookworm-backports has golang-1.2x), whose toolchain switching
# (GOTOOLCHAIN=auto, exported by tools/env.sh) then fetches the version
# go.mod names through the Go module proxy, like any module.
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]; }
go_version() { "$1" env GOVERSION 2>/dev/null | sed 's/^go//'; }
. tools/env.sh
if ! command -v go >/dev/null || ! version_ge "$(GOTOOLCHAIN=local go_version go)" 1.21; then
  pkg=$(apt-cache search --names-only '^golang-1\.[0-9]+-go$' | awk '{print $1}' | sort -V | tail -1)
  if [ -z "$pkg" ] || ! version_ge "$(echo "$pkg" | sed 's/golang-\(.*\)-go/\1/')" 1.21; then
    # Backports from the mirror this machine already uses.
    mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' | awk '$2 == "bookworm" {print $1; exit}')
    [ -n "$mirror" ] || { echo "setup: no bookworm mirror in the apt sources; install Go $GO_VERSION by hand" >&2; exit 1; }
    echo "setup: enabling bookworm-backports (from $mirror) for a newer Go"
    echo "deb $mirror bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/tlite-backports.list >/dev/null
    $SUDO apt-get update -qq
    pkg=$(apt-cache search --names-only '^golang-1\.[0-9]+-go$' | awk '{print $1}' | sort -V | tail -1)
  fi
  echo "setup: installing $pkg"
  apt_install -t bookworm-backports "$pkg" 2>/dev/null || apt_install "$pkg"
  . tools/env.sh
fi
if ! version_ge "$(go_version go)" "$GO_VERSION"; then
  echo "setup: go $(GOTOOLCHAIN=local go_version go) cannot switch to Go $GO_VERSION (GOTOOLCHAIN=$(go env GOTOOLCHAIN))" >&2
  exit 1
fi
echo "setup: $(go version) (the tlite scripts put it on PATH through tools/env.sh)"
