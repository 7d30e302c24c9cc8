#!/usr/bin/env bash
# Prefill one, decode many on one H200 (see tools/gpu/batched_decode_h200.py): random-init Llama-3.1-8B
# shape, bf16, ~5k-token prompts, snapkv at 50%: examples/s at decode batch 16 vs 1, then an fp32
# exact-match check (decode batch 4 vs the batch-1 engine). About 2-4 minutes of GPU time.
# Run from the repository root on the GPU machine, after ../shared/tools/device-wheels.sh filled .whl/:
#   bash tools/gpu/batched_decode_h200.sh       (the record lands in $OUT, or ./batched-decode-out)
# Extra arguments go to batched_decode_h200.py (e.g. --examples 16).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-batched-decode-out}"
mkdir -p "$OUT"
source tools/gpu/use_wheels.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv" || true
python3 tools/gpu/batched_decode_h200.py --out "$OUT" "$@" 2>&1 | tee "$OUT/batched_decode_h200.log"
