#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to tlite's main job: installs the
# system dependencies, builds bin/tl, and runs the shipped default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
. tools/env.sh
mkdir -p bin
go build -o bin/tl ./tools/tl
model=testdata/default/model.onnx
[ -f "$model" ] || model=testdata/models/llama/model.onnx
echo "== tl inspect $model"
bin/tl inspect "$model"
