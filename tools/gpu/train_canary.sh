#!/usr/bin/env bash
# Train the canary on one GPU and score it on the held-out synthetic set, offline.
# On the device machine, from the repository root (carrying .whl, filled here beforehand by
# `../shared/tools/device-wheels.sh --no-snakemake`):
#     bash tools/gpu/train_canary.sh
# Writes $OUT/canary/ (config.json, generation_config.json, model.safetensors, tokenizer.json,
# tokenizer_config.json, training_log.json) and $OUT/canary_report.json: 7 files. The weights are saved
# every checkpoint_every steps, so a run cut short still leaves the last checkpoint.
# TRAIN_BUDGET_S (default 400) bounds the training time: the step count is cut to what fits (measured
# first, recorded in training_log.json), and training stops and saves past 105% of it. With the wheel
# install and the scoring, the whole script stays under 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
: "${OUT:?OUT must name the folder for the results}"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
workers=${TRAIN_WORKERS:-$(( $(nproc) > 4 ? $(nproc) - 2 : 1 ))}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
python3 -m kvcache_bench.train --config "${TRAIN_CONFIG:-config/canary-train.yaml}" --out "$OUT/canary" \
  --num-workers "$workers" --time-budget-s "${TRAIN_BUDGET_S:-400}"
# The report needs kvpress (in .whl); a failure here leaves the trained weights intact.
timeout "${REPORT_TIMEOUT_S:-90}" python3 -m kvcache_bench.canary "$OUT/canary" --device cuda > "$OUT/canary_report.json" \
  && cat "$OUT/canary_report.json" \
  || { rm -f "$OUT/canary_report.json"; echo "scoring did not finish; the weights in \$OUT/canary are complete"; }
