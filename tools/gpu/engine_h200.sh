#!/usr/bin/env bash
# On the GPU machine, from the repo root after ../shared/tools/device-wheels.sh filled .whl/: writes $OUT/engine_h200.json
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/use_wheels.sh
python3 tools/gpu/engine_h200.py --out "$OUT/engine_h200.json" "$@"
