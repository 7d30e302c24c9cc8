#!/usr/bin/env bash
# System packages that some tests need, installed where this machine allows it; elsewhere those tests skip,
# saying why (never a failure a newcomer cannot act on).
#   chromium  tests/test_report.py renders the HTML report            root + apt-get: Debian's chromium
#   SLURM     tests/test_slurm.py runs the demo through a real SLURM  root + tools/start_slurm.sh
#             (a single-node SLURM with 2 fake GPUs, from Debian's slurm-wlm and munge)
# Prints one line per package, "<name>: ready" or "<name>: skipped (<why>)". Idempotent.
set -uo pipefail
cd "$(dirname "$0")/.."
start_slurm=tools/start_slurm.sh
root=$([ "$(id -u)" = 0 ] && echo yes || echo no)

if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  echo "chromium: ready"
elif [ "$root" = yes ] && command -v apt-get >/dev/null; then
  if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1; then
    echo "chromium: ready"
  else
    echo "chromium: skipped (apt-get install chromium failed)"
  fi
else
  echo "chromium: skipped (not installed; installing it needs root and apt-get: sudo apt-get install chromium)"
fi

if [ ! -f "$start_slurm" ]; then
  echo "slurm: skipped ($start_slurm not found)"
elif [ "$root" != yes ]; then
  echo "slurm: skipped (starting SLURM needs root: sudo bash $start_slurm)"
elif bash "$start_slurm" >/dev/null 2>&1; then
  echo "slurm: ready"
else
  echo "slurm: skipped (bash $start_slurm failed)"
fi
