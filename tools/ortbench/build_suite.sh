#!/bin/sh
# build_suite.sh: exports the models of suite.json (random weights, real
# shapes) into DIR, default $TLITE_BENCH or /work/bench13. About 1.5 GB and
# ten minutes of a 2-core machine; nothing here is committed.
#
#   tools/ortbench/build_suite.sh [DIR]
#   node tools/ortbench/compare.js --dir DIR
set -eu
DIR=${1:-${TLITE_BENCH:-/work/bench13}}
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
mkdir -p "$DIR"
$PY models/export/vision.py --out "$DIR/vision" --size 224 \
	--only resnet18,mobilenet_v3_large,efficientnet_b0,unet
for m in clip_vision clip_text bert llama; do
	[ -f "$DIR/${m}_full/model.onnx" ] && continue
	$PY models/export/export_all.py --out "$DIR" --only $m --size full
done
if [ ! -f "$DIR/llama_full_e0m4/model.onnx" ]; then
	[ -x bin/tl ] || go build -o bin/tl ./tools/tl
	mkdir -p "$DIR/llama_full_e0m4"
	bin/tl quantize "$DIR/llama_full/model.onnx" "$DIR/llama_full_e0m4/model.onnx" --format e0m4
fi
echo "models in $DIR; run: node tools/ortbench/compare.js --dir $DIR"
