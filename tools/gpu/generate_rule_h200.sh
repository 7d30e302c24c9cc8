#!/usr/bin/env bash
# The generate rule on one H200 beside kvpress's pipeline and the floor (tools/gpu/generate_rule_h200.py):
# random-init Llama-3.1-8B shape, bf16, SnapKV keeping 50%, question-aware, ~5k-token prompts, 64 new tokens;
# decode batch 1 (the batch-1 engine) and the study's default, each one Snakemake generate job. ~6 minutes.
# Run from the repository root on the GPU machine, after ../shared/tools/device-wheels.sh filled .whl/:
#   bash tools/gpu/generate_rule_h200.sh          (records land in $OUT, or ./generate-rule-out)
#   TINY=1 bash tools/gpu/generate_rule_h200.sh   (2-layer stand-in on CPU: the same plumbing in a minute)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/generate-rule-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
source tools/gpu/use_wheels.sh
PYTHON=${PYTHON:-python3}
EXAMPLES=${EXAMPLES:-32}
tiny=()
[ "${TINY:-0}" = 1 ] && tiny=(--tiny)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/generate-rule.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# A scratch copy of the workflow, so the checkout's results/ stay untouched.
tar --exclude=./results --exclude=./logs --exclude=./.snakemake --exclude=./.whl --exclude=./.git \
    --exclude=./.venv -cf - . | tar -xf - -C "$WORK"
cd "$WORK"
export PYTHONPATH="${PYTHONPATH/$OLDPWD/$WORK}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/run.log" 2>/dev/null || true
"$PYTHON" tools/gpu/generate_rule_h200.py prepare --work "$WORK/study" --examples "$EXAMPLES" "${tiny[@]}" 2>&1 | tee -a "$OUT/run.log"
"$PYTHON" -m snakemake --cores all --resources gpu=1 --scheduler greedy --configfile "$WORK/study/study.yaml" \
    --until check_config >> "$OUT/snakemake.log" 2>&1
targets=$(find results/checks -name '*.ok' | sed 's#^results/checks/#results/predictions/#; s#\.ok$#.jsonl#' | sort -r)
start=$(date +%s.%N)
"$PYTHON" -m snakemake $targets --cores all --resources gpu=1 --scheduler greedy \
    --configfile "$WORK/study/study.yaml" >> "$OUT/snakemake.log" 2>&1
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "generate jobs wall time (model loads included): %.1f s\n", b - a }' | tee -a "$OUT/run.log"
find logs/generate -name '*.log' -exec tail -n 40 {} + >> "$OUT/snakemake.log"
"$PYTHON" tools/gpu/generate_rule_h200.py kvpress --work "$WORK/study" --examples "$((EXAMPLES / 2))" \
    --rows results/data/synthetic/synthetic_qa.jsonl "${tiny[@]}" > "$WORK/kvpress.log" 2>&1 || { tail -20 "$WORK/kvpress.log"; exit 1; }
mkdir -p "$OUT/predictions"
for f in $targets; do cp "$f" "$OUT/predictions/$(echo "$f" | tr '/' '_' | sed 's/^results_predictions_//')"; done
cp "$WORK/study/kvpress_pipeline.jsonl" "$OUT/" 2>/dev/null || true
"$PYTHON" tools/gpu/generate_rule_h200.py report --work "$WORK/study" --out "$OUT" --predictions "$OUT/predictions" "${tiny[@]}" | tee -a "$OUT/run.log"
