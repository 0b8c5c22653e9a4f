#!/usr/bin/env bash
# Measures, with tlite itself, every quality figure of a trained model's card
# (models/README.md): bits per byte on the old and new held-out text, loss by
# position bucket, the in-context task accuracies, fp32 against PyTorch, and
# the E0M4 / INT4 deltas. Writes each command's output under OUT and prints
# a summary; nothing in the model directory is changed.
#
#   models/train/card.sh testdata/longctx /tmp/card
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${1:?usage: card.sh MODEL_DIR OUT_DIR}
OUT=${2:?usage: card.sh MODEL_DIR OUT_DIR}
mkdir -p "$OUT/q"
. tools/env.sh
go build -o "$OUT/tl" ./tools/tl
go build -o "$OUT/tleval" ./models/train/tleval
tl=$OUT/tl
sep='\n%\n'

run() { # name, command...
  local name=$1; shift
  echo "== $name: $*" | tee "$OUT/$name.txt"
  "$@" >>"$OUT/$name.txt" 2>&1
  tail -n 4 "$OUT/$name.txt"
}

run ppl_old "$tl" perplexity --model "$D/model.onnx" --text "$D/heldout.txt" --sep "$sep" --eos --json
run ppl_split "$tl" perplexity --model "$D/model.onnx" --text "$D/heldout_split.txt" --sep "$sep" --eos \
  --buckets 0,128,512,2048 --json
run tasks "$OUT/tleval" --model "$D/model.onnx" "$D"/evals/recall_256.jsonl "$D"/evals/recall_1024.jsonl \
  "$D"/evals/recall_2000.jsonl "$D"/evals/mc.jsonl "$D"/evals/continuation.jsonl
for f in e0m4 int4; do
  "$tl" quantize "$D/model.onnx" "$OUT/q/$f.onnx" --format "$f" --group 128 >"$OUT/quantize_$f.txt" 2>&1
  run "ppl_old_$f" "$tl" perplexity --model "$OUT/q/$f.onnx" --tokenizer "$D/tokenizer.json" --ctx 2048 \
    --text "$D/heldout.txt" --sep "$sep" --eos --json
  run "ppl_split_$f" "$tl" perplexity --model "$OUT/q/$f.onnx" --tokenizer "$D/tokenizer.json" --ctx 2048 \
    --text "$D/heldout_split.txt" --sep "$sep" --eos --json
done
run pytorch go test -count=1 -v -run 'TestDefault' ./engine/generate
run sample "$tl" generate --model "$D/model.onnx" --prompt "The secret of life is" -n 48 --temperature 0.8 \
  --top-p 0.95 --seed 1
echo "card: outputs in $OUT"
