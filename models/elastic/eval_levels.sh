#!/bin/sh
# Perplexity by level for the elastic variants of one model (spec §3c),
# each through `tl perplexity --level`, on the same held-out documents.
#
#   models/elastic/eval_levels.sh TL TEXT OUTDIR VARIANT_DIR...
#
# TL is the tl binary, TEXT the held-out text (documents split by "\n%\n"),
# OUTDIR receives one JSON line per (variant, level) in ppl.jsonl.
# Each VARIANT_DIR holds model.onnx and elastic.json (tl elastic build);
# a folder without elastic.json (a layer-dropping baseline) runs once.
set -eu
tl=$1 text=$2 out=$3
shift 3
mkdir -p "$out"
for v in "$@"; do
	if [ -f "$v/elastic.json" ]; then
		levels=${LEVELS:-"20 30 40 50 60 70 80 90 100"}
	else
		levels=0
	fi
	for l in $levels; do
		flag=""
		[ "$l" != 0 ] && flag="--level $l"
		r=$(nice -n 10 "$tl" perplexity --model "$v/model.onnx" --text "$text" --sep '\n%\n' --eos $flag --json 2>/dev/null | tr -d '\n')
		printf '{"variant": "%s", "level": %s, "result": %s}\n' "$(basename "$v")" "$l" "$r" >> "$out/ppl.jsonl"
	done
done
