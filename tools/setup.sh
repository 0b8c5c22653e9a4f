#!/usr/bin/env bash
# Installs everything tlite needs on Debian 12: the OpenCL loader, headers and
# PoCL (an OpenCL device on the CPU, for machines without a GPU driver),
# PyTorch, torchvision and ONNX for the export recipes, and Go itself when the machine has
# none new enough (fetched from the Go module proxy, which serves toolchains).
# Safe to run again: each step is skipped when already done.
set -euo pipefail

GO_VERSION=1.26.8
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

need_apt=()
for p in pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo python3-torch python3-torchvision python3-onnx python3-numpy unzip curl ca-certificates gcc; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

have_go() {
  command -v go >/dev/null 2>&1 || return 1
  local v; v=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
  [ "$(printf '%s\n%s\n' "$GO_VERSION" "$v" | sort -V | head -1)" = "$GO_VERSION" ]
}
if ! have_go; then
  dir=/usr/local/go-$GO_VERSION
  if [ ! -x "$dir/bin/go" ]; then
    echo "setup: fetching Go $GO_VERSION from the module proxy"
    tmp=$(mktemp -d)
    curl -fsSL -o "$tmp/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go$GO_VERSION.linux-$(dpkg --print-architecture).zip"
    (cd "$tmp" && unzip -q go.zip)
    $SUDO mv "$tmp/golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-$(dpkg --print-architecture)" "$dir"
    $SUDO chmod -R a+rX "$dir"
    $SUDO chmod a+x "$dir"/bin/* "$dir"/pkg/tool/*/*
    rm -rf "$tmp"
  fi
  echo "setup: Go is in $dir/bin (the tlite scripts add it to PATH themselves)"
fi
