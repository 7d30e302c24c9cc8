#!/usr/bin/env bash
# On the GPU machine, from the repo root after ../shared/tools/device-wheels.sh filled .whl/: writes $OUT/engine_h200.json
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && python3 tools/gpu/engine_h200.py --out "$OUT/engine_h200.json" "$@"
