#!/usr/bin/env bash
# The reference perf pass on one H200 (see tools/gpu/perf_h200.py): random-init Llama-3.1-8B shape, bf16,
# 4k and 16k contexts, full cache + snapkv/streaming_llm/knorm at 50% and 10%; ~3-4 minutes of GPU time.
# Run from the repository root on the GPU machine, after ../shared/tools/device-wheels.sh filled .whl/:
#   bash tools/gpu/perf_h200.sh            (records land in $OUT, or ./perf-out without one)
# Extra arguments go to perf_h200.py (e.g. --repeats 5).
# NVML comes from nvidia-ml-py: if the GPU image lacks it, add its (pure-Python) wheel to .whl/ first:
#   pip download --no-deps nvidia-ml-py==13.615.71 -d .whl
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-perf-out}"
mkdir -p "$OUT"
source tools/gpu/use_wheels.sh
python3 -c "import pynvml" 2>/dev/null || { echo "pynvml missing: pip download --no-deps nvidia-ml-py==13.615.71 -d .whl" >&2; exit 3; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.csv" || true
python3 tools/gpu/perf_h200.py --out "$OUT" "$@" 2>&1 | tee "$OUT/perf_h200.log"
