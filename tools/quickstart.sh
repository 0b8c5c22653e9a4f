#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to tlite's main job: installs the
# system dependencies, builds bin/tl, and runs the shipped default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
. tools/env.sh
mkdir -p bin
go build -o bin/tl ./tools/tl
model=testdata/longctx/model.onnx
echo "== tl inspect $model (symbolic shapes, folded shape ops)"
bin/tl inspect "$model" --top 3
echo
echo "== tl generate: the shipped default model (a 6.8M-parameter LLaMA-style model with a 2048-token context, trained here on fortunes and Debian documentation)"
bin/tl generate --model "$model" --prompt "The secret of life is" -n 48 --temperature 0.8 --top-p 0.95 --seed 1
