#!/usr/bin/env bash
# One device call of a workflow run on the lent GPU, from the repository root, carrying .whl:
#
#   KVCACHE_BENCH_GIT_COMMIT=<sha> NAME=reference-1 BUDGET_S=540 \
#     bash tools/gpu/workflow_on_lease.sh <snakemake targets> --configfile config/reference-h200.yaml
#
# Runs `snakemake` with the arguments given (targets first; `--cores all --resources gpu=1 --scheduler greedy
# --rerun-incomplete` are added) for at most BUDGET_S seconds, then, finished or cut off, tars what the run has made
# so far into $OUT/$NAME.tar.gz: results/ (less the built models and tokenizers), logs/, benchmarks/ and the call's
# snakemake log, as one file, since a device call brings back only a few. A run that the budget cut off goes on in the
# next call on the still-warm machine, whose ignored folders (results/, .snakemake/) survive between calls: the
# same command with another NAME.
#
# Why a script: the device's command line holds 2,000 characters, and earlier hand-written calls lost outputs (more
# files than come back; a config left out of the archive; a lock left by a cut-off run that stopped the next).
# KVCACHE_BENCH_GIT_COMMIT is required: the copy on the device has no .git, and every manifest names the commit.
# Rehearse it here: NO_WHEELS=1 OUT=/tmp/lease NAME=demo bash tools/gpu/workflow_on_lease.sh all --configfile
# config/demo.yaml (SNAKEMAKE_RESOURCES='' on a machine without a GPU).
# No rule does this: it brings a workflow run back from a machine that keeps nothing once it is handed back.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?OUT must name the folder the device brings back}"
: "${NAME:?NAME must name the archive of this call, e.g. reference-1}"
: "${KVCACHE_BENCH_GIT_COMMIT:?must name the commit: put KVCACHE_BENCH_GIT_COMMIT=<git rev-parse HEAD, run here> in the command}"
(( $# > 0 )) || { echo "give the snakemake targets and options" >&2; exit 2; }
source tools/gpu/use_wheels.sh
export KVCACHE_BENCH_GIT_COMMIT HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
log=$OUT/$NAME.snakemake.log
read -ra resources <<< "${SNAKEMAKE_RESOURCES---resources gpu=1}"

# a run cut off by the last call's budget may have left its lock behind (unlocking parses the workflow: only then)
if compgen -G ".snakemake/locks/*" > /dev/null; then python3 -m snakemake "$@" --unlock > /dev/null 2>&1 || true; fi
start=$(date +%s)
timeout --signal=INT --kill-after=30 "${BUDGET_S:-540}" python3 -m snakemake "$@" --cores all "${resources[@]}" \
  --scheduler greedy --rerun-incomplete > "$log" 2>&1
status=$?
verdict="snakemake exit $status after $(( $(date +%s) - start )) s"
(( status == 124 )) && verdict+=": cut off by BUDGET_S=${BUDGET_S:-540}; the same command, another NAME, goes on"
echo "$verdict" | tee -a "$log"

present=()
for folder in results logs benchmarks; do [[ -d $folder ]] && present+=("$folder"); done
# LEAVE_OUT: more paths to keep out of the archive, space-separated (rows carried here, which a file of over 16 MiB
# would not bring back anyway)
read -ra left_out <<< "${LEAVE_OUT:-}"
# gzipped (a sweep's predictions and scores are tens of MB of JSON), and cut into 15 MiB parts when larger: a device
# call brings back files of at most 16 MiB (join them with cat NAME.tar.gz.part-* > NAME.tar.gz)
tar -czf "$OUT/$NAME.tar.gz" --exclude=results/models --exclude=results/tokenizers "${left_out[@]/#/--exclude=}" \
  "${present[@]}" -C "$OUT" "$NAME.snakemake.log"
tail -n 25 "$log"
rm "$log"
echo "$OUT/$NAME.tar.gz: $(tar -tzf "$OUT/$NAME.tar.gz" | grep -vc '/$') files, $(du -h "$OUT/$NAME.tar.gz" | cut -f1)"
if (( $(stat -c %s "$OUT/$NAME.tar.gz") > 15 * 1024 * 1024 )); then
  split -b 15M "$OUT/$NAME.tar.gz" "$OUT/$NAME.tar.gz.part-" && rm "$OUT/$NAME.tar.gz" && ls "$OUT"
fi
exit "$status"
