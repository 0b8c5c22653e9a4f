#!/bin/sh
# The SLO side of ElastiLM end to end (models/elastic/tlm.py's docstring
# says what each step does). Rerun it whenever the base model changes:
#
#   models/elastic/tlm_pipeline.sh MODEL_DIR CALIB_WORKDIR OUT [N_TRAIN N_EVAL REQUESTS]
#
# MODEL_DIR   a llama.py-exported model (testdata/longctx)
# CALIB_WORKDIR  its training work dir (importance calibration, train split)
# OUT         everything lands here: OUT/el (the elastic model, profile.json,
#             tlm/), OUT/w (tasks, grids, TLM checkpoint), OUT/trace.json
#
# Every step runs at nice 10. TL is the tl binary (default: build it).
set -eu
MODEL=$1
CALIB=$2
OUT=$3
NTRAIN=${4:-40}
NEVAL=${5:-24}
NREQ=${6:-24}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${TLITE_PYTHON:-/usr/bin/python3}
if [ -z "${TL:-}" ]; then
	TL=$OUT/tl
	mkdir -p "$OUT"
	(cd "$HERE/../.." && nice -n 10 go build -o "$TL" ./tools/tl)
fi
EL=$OUT/el
W=$OUT/w
mkdir -p "$W"
step() { echo "== $(date +%H:%M:%S) $*"; }

step "elastic build (importance order)"
[ -f "$EL/elastic.json" ] || nice -n 10 "$TL" elastic build --model "$MODEL" --out "$EL" --calib "$CALIB"
step "tasks (train and held splits by document hash)"
nice -n 10 "$PY" "$HERE/tlm.py" tasks --model "$EL" --out "$W" --n-train "$NTRAIN" --n-eval "$NEVAL"
step "untrained TLM of the real size, to time it in the profile"
nice -n 10 "$PY" "$HERE/tlm.py" init --model "$EL" --work "$W/init"
step "profile: TTFT(p, m), TPOT(m), TLM and switch time, measured"
nice -n 10 "$TL" elastic profile --model "$EL/model.onnx" --tlm "$W/init/tlm" -r "${PROFILE_REPS:-5}"
step "grid on the train split (self-information compression), beside the TLM's masked-token pretraining"
nice -n 10 "$PY" "$HERE/tlm.py" pretrain --model "$EL" --work "$W" --steps "${MLM_STEPS:-15}" &
nice -n 10 "$PY" "$HERE/tlm.py" grid --model "$EL" --work "$W" --split train
wait
step "train the TLM (MLM, score head, decision head) and export it"
nice -n 10 "$PY" "$HERE/tlm.py" train --model "$EL" --work "$W" --profile "$EL/profile.json" \
	--head-steps "${HEAD_STEPS:-150}"
rm -rf "$EL/tlm"
cp -r "$W/tlm" "$EL/tlm"
step "grid on the evaluation split (score-head compression): the oracle's table"
for k in 0 1; do
	nice -n 10 "$PY" "$HERE/tlm.py" grid --model "$EL" --work "$W" --split eval --tlm "$W/tlm.pt" --shard "$k/2" &
done
wait
cat "$W/grid_eval.0.jsonl" "$W/grid_eval.1.jsonl" > "$W/grid_eval.jsonl.tmp"
mv "$W/grid_eval.jsonl.tmp" "$W/grid_eval.jsonl"
step "trace: decision head vs greedy, random and oracle at three skews"
nice -n 10 "$TL" elastic trace --model "$EL/model.onnx" --grid "$W/grid_eval.jsonl" --requests "$NREQ" \
	--check "${CHECK:-8}" --out "$OUT/trace.json"
step "done"
