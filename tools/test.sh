#!/usr/bin/env bash
# Runs tlite's whole test suite: formatting, vet, and every package's tests
# (the kernel tests run on whatever OpenCL device is present; PoCL here).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt needed:"; echo "$bad"; exit 1; fi
go vet ./...
# Builds that need no C compiler: the host without cgo, and linux/arm64
# (tools/cross-arm64.sh; its --cgo build and the emulated run are CI steps).
CGO_ENABLED=0 go build -o /dev/null ./tools/tl
CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -o /dev/null ./tools/tl
# The ONNX node-test corpus through the OpenCL backend, as one summary line
# (the per-op table: go run ./tools/tl conformance).
go run ./tools/tl conformance --summary
go test -count=1 -timeout 40m ./... "$@"
# ONNX 1.12's own node corpus, which the tests generated into the cache, as
# one summary line (the per-op table: go run ./tools/tl conformance --corpus onnx).
corpus="${TLITE_CACHE:-$HOME/.cache/tlite}/onnx-node-tests"
[ -d "$corpus/node" ] || /usr/bin/python3 tools/onnx_node_corpus.py --out "$corpus"
go run ./tools/tl conformance --corpus onnx --dir "$corpus" --summary
# Every kernel variant the launchers build, compiled for SPIR-V at OpenCL C
# 1.2/2.0/3.0 with fp16 on and off, parameter limits, and a 64-register gate
# for the GPU set (known failures in tools/kernelgate.allow, printed each run).
bash tools/kernelgate.sh
