#!/usr/bin/env bash
# Prove that, on an N-GPU machine, `snakemake --resources gpu=N` runs N generation jobs at once, each
# pinned to its own GPU (kvcache_bench/runtime/gpus.py). Run from the repository root:
#
#   bash tools/gpu/multigpu_check.sh              # on the GPU machine; N = GPUs present (at least 2)
#   REHEARSAL=1 GPUS=2 bash tools/gpu/multigpu_check.sh   # same plumbing on a CPU machine (fake GPU count)
#
# Writes to $OUT (default ./multigpu-out): multigpu_report.json (verdict, per-job GPU index/UUID and
# start/end times, overlap), gpu_trace.jsonl (what each job claimed), gpus.csv and nvsmi_apps.csv
# (nvidia-smi: GPUs, and processes per GPU sampled every 200 ms), gpu_log_lines.txt (each job's
# "GPU: ..." log line), snakemake.log. Exit status 0 only if the jobs overlapped on distinct GPUs.
# No rule does this: it runs the workflow under --resources gpu=N and judges, from outside, where its jobs ran.
set -euo pipefail
OUT=${OUT:-$PWD/multigpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PYTHON=${PYTHON:-python3}
if [ "${REHEARSAL:-0}" = 1 ]; then
  GPUS=${GPUS:-2}
  export KVCACHE_BENCH_GPU_COUNT=$GPUS   # no real GPU: the allocator hands out fake indices
  rehearsal=--rehearsal
else
  GPUS=${GPUS:-$(nvidia-smi -L | grep -c '^GPU ')}
  rehearsal=
  nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader > "$OUT/gpus.csv"
fi
[ "$GPUS" -ge 2 ] || { echo "need at least 2 GPUs, found $GPUS" >&2; exit 2; }

# Work in a scratch copy so the checkout's results/ stay untouched.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/multigpu.XXXXXX")
# the run's model workers leave within a second of it, writing their logs' manifests: retry until they have
trap 'kill ${SAMPLER:-} 2>/dev/null || true; for _ in 1 2 3 4 5 6 7 8 9 10; do rm -rf "$WORK" 2>/dev/null && break; sleep 1; done' EXIT
tar --exclude=./results --exclude=./logs --exclude=./.snakemake --exclude=./.whl --exclude=./.git \
    --exclude=./.venv --exclude=./multigpu-out -cf - . | tar -xf - -C "$WORK"
cd "$WORK"
"$PYTHON" tools/gpu/multigpu_config.py --gpus "$GPUS" --out "$WORK/multigpu" $rehearsal

export KVCACHE_BENCH_GPU_TRACE=$OUT/gpu_trace.jsonl
export KVCACHE_BENCH_GPU_LOCK_DIR=$WORK/gpu-locks
rm -f "$KVCACHE_BENCH_GPU_TRACE"
unset CUDA_VISIBLE_DEVICES

# Build the model, data and checks first, so that the generation jobs are all that runs when timed.
"$PYTHON" -m snakemake --cores all --configfile multigpu/multigpu.yaml --omit-from generate \
  > "$OUT/snakemake.log" 2>&1
targets=$("$PYTHON" -m snakemake -n --configfile multigpu/multigpu.yaml 2>&1 | grep -o 'results/predictions/[^ ,]*\.jsonl' | sort -u)

if [ -z "$rehearsal" ]; then
  nvidia-smi --query-compute-apps=timestamp,pid,gpu_uuid,used_memory --format=csv,noheader -lms 200 \
    > "$OUT/nvsmi_apps.csv" 2>/dev/null &
  SAMPLER=$!
fi
start=$(date +%s.%N)
# targets first: --configfile and --resources would swallow them
"$PYTHON" -m snakemake $targets --profile profiles/local --resources gpu="$GPUS" \
  --configfile multigpu/multigpu.yaml >> "$OUT/snakemake.log" 2>&1
end=$(date +%s.%N)
[ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null || true
awk -v a="$start" -v b="$end" 'BEGIN { printf "generation wall time: %.1f s\n", b - a }' >> "$OUT/snakemake.log"
grep -h "GPU: " logs/generate -r > "$OUT/gpu_log_lines.txt" || true

evidence=()
[ -z "$rehearsal" ] && evidence=(--gpus "$OUT/gpus.csv" --apps "$OUT/nvsmi_apps.csv")
"$PYTHON" tools/gpu/multigpu_report.py --trace "$OUT/gpu_trace.jsonl" --expect "$GPUS" "${evidence[@]}" \
  --out "$OUT/multigpu_report.json"
