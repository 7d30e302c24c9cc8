#!/usr/bin/env bash
# Train several canary variants at once on one GPU (a 3M-parameter model leaves an H200 mostly idle, so
# parallel runs cost little each), score each on the held-out set, and bring all of them back.
# On the device machine, from the repository root, carrying .whl (and any --init-from directory):
#     SWEEP='lr1e-3|learning_rate=1e-3
#            bf16|bf16_autocast=true;init_from=...' bash tools/gpu/train_canary_sweep.sh
# One line per variant: a name, '|', then settings overrides (`--set KEY=VALUE`, VALUE in YAML) separated
# by ';'; the key init_from names an earlier run's directory to continue from.
# Writes, per variant, $OUT/<name>.safetensors (the weights) and $OUT/<name>.tar (config, tokenizer,
# training_log.json, report.json, train.log): at most 4 variants, since 8 files come back.
# TRAIN_BUDGET_S (default 420) is each variant's training time; scoring adds up to REPORT_TIMEOUT_S.
# No rule does this: rule train_canary trains config/canary-train.yaml alone, unscored; this trains variants at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/use_wheels.sh
: "${OUT:?OUT must name the folder for the results}"
: "${SWEEP:?SWEEP must list the variants, one name|arguments line each}"
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error PYTHONUNBUFFERED=1
mapfile -t variants < <(printf '%s\n' "$SWEEP" | sed 's/^[[:space:]]*//' | grep -v '^$')
(( ${#variants[@]} <= 4 )) || { echo "at most 4 variants: 8 files come back"; exit 2; }
workers=${TRAIN_WORKERS:-$(( ($(nproc) - ${#variants[@]}) / ${#variants[@]} ))}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true

run_variant() {
  local name=$1 overrides=$2 dir=/tmp/sweep/$1 args=() item
  mkdir -p "$dir"
  IFS=';' read -ra items <<< "$overrides"
  for item in "${items[@]}"; do
    item=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' <<< "$item")
    case $item in
      "") ;;
      init_from=*) args+=(--init-from "${item#init_from=}") ;;
      *) args+=(--set "$item") ;;
    esac
  done
  python3 -m kvcache_bench.canary.train --config "${TRAIN_CONFIG:-config/canary-train.yaml}" --out "$dir" \
    --num-workers "$workers" --time-budget-s "${TRAIN_BUDGET_S:-420}" "${args[@]}" > "$dir/train.log" 2>&1 \
    || echo "$name: training failed (see train.log)" >> "$dir/train.log"
  if [[ -f $dir/model.safetensors ]]; then
    timeout "${REPORT_TIMEOUT_S:-100}" python3 -m kvcache_bench.canary.report_card "$dir" --documents "${REPORT_DOCUMENTS:-16}" --device "${REPORT_DEVICE:-cuda}" > "$dir/report.json" 2>> "$dir/train.log" \
      || echo "$name: scoring did not finish" >> "$dir/train.log"
    cp "$dir/model.safetensors" "$OUT/$name.safetensors"
  fi
  tar -C /tmp/sweep -cf "$OUT/$name.tar" --exclude=model.safetensors "$name"
}

for line in "${variants[@]}"; do
  run_variant "${line%%|*}" "${line#*|}" &
done
wait
for line in "${variants[@]}"; do
  name=${line%%|*}
  echo "== $name: ${line#*|}"
  grep '"step"' "/tmp/sweep/$name/train.log" | awk 'NR % 4 == 0' | tail -12 || true
  grep -i "curriculum opens\|decaying\|failed\|error\|did not" "/tmp/sweep/$name/train.log" | tail -12 || true
  cat "/tmp/sweep/$name/report.json" 2>/dev/null || true
done
