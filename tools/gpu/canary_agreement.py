"""Decode batch 1 vs the study's default on a model with real answers: the trained canary, on the GPU.

    python tools/gpu/canary_agreement.py --out "$OUT"                 # on the GPU (bf16, and fp32 for a check)
    python tools/gpu/canary_agreement.py --out /tmp/ca --examples 6   # CPU rehearsal (fp32 only)

The canary (resources/canary, trained on seeded synthetic documents, seed 20261130) answers the demo's
held-out documents (seed 1234, config/demo.yaml's generator settings). Each cell runs through
cell.run_cell (the generate rule's work) at decode batch 1 and at the default; in fp32 the answers must be
identical (greedy ids agree), in bf16 batched matmuls round differently, so this reports the share of
identical answers and the score difference. Writes canary_agreement.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kvcache_bench.analysis.metrics import score_records, task_score  # noqa: E402
from kvcache_bench.data.longbench import normalise_rows  # noqa: E402
from kvcache_bench.data.synthetic import make_synthetic_rows  # noqa: E402
from kvcache_bench.engine.cell_runner import run_cell  # noqa: E402
from kvcache_bench.engine.loading import ModelSettings  # noqa: E402
from kvcache_bench.study.cell import CellRun  # noqa: E402
from kvcache_bench.study.prompts import max_new_tokens_for  # noqa: E402

TASK = "synthetic_qa"
CELLS = [
    ("full_cache", 1.0),
    ("snapkv", 0.5),
    ("snapkv", 0.1),
    ("streaming_llm", 0.5),
    ("knorm", 0.5),
    ("pyramidkv", 0.5),
]
METHOD_KWARGS = {"snapkv": {"window_size": 8}, "pyramidkv": {"window_size": 8}}  # config/demo.yaml's
DEFAULT_DECODE_BATCH = 32


def run(rows, method, retention, dtype, decode_batch, device):
    settings = ModelSettings(
        path=str(ROOT / "resources" / "canary"), dtype=dtype, max_context_tokens=4096, device=device
    )
    run = CellRun(
        task=TASK,
        model_settings=settings,
        method=method,
        retention=retention,
        question_mode="question_aware",
        max_new_tokens=max_new_tokens_for(TASK),
        seed=1234,
        method_kwargs=METHOD_KWARGS.get(method),
        decode_batch_size=decode_batch,
    )
    records = list(run_cell(rows, run, progress=False))
    scores = [s["score"] for s in score_records(TASK, records)]
    return records, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--examples", type=int, default=96)
    parser.add_argument("--decode-batch", type=int, default=DEFAULT_DECODE_BATCH)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    documents = -(-args.examples // 3)
    rows = normalise_rows(
        make_synthetic_rows(
            documents,
            seed=1234,
            min_words=256,
            max_words=768,
            facts_per_document=6,
            questions_per_document=3,
            task=TASK,
        ),
        TASK,
        args.examples,
    )
    dtypes = ["bfloat16", "float32"] if device == "cuda" else ["float32"]
    results = []
    for dtype in dtypes:
        for method, retention in CELLS if dtype == "bfloat16" else CELLS[1:2] + CELLS[-1:]:
            started = time.perf_counter()
            one, one_scores = run(rows, method, retention, dtype, 1, device)
            many, many_scores = run(rows, method, retention, dtype, args.decode_batch, device)
            same = [a["prediction"] == b["prediction"] for a, b in zip(one, many)]
            result = {
                "dtype": dtype,
                "method": method,
                "retention": retention,
                "examples": len(rows),
                "decode_batch_size": args.decode_batch,
                "effective_decode_batch_size": max(r["effective_decode_batch_size"] for r in many),
                "decode_steps": many[0]["decode_steps"],
                "identical_answers_share": sum(same) / len(same),
                "score_decode_1": task_score(one_scores),
                f"score_decode_{args.decode_batch}": task_score(many_scores),
                "score_difference": task_score(many_scores) - task_score(one_scores),
                "examples_per_s_decode_1": len(one) / sum(r["seconds"] for r in one),
                f"examples_per_s_decode_{args.decode_batch}": len(many) / sum(r["seconds"] for r in many),
                "wall_s": time.perf_counter() - started,
            }
            results.append(result)
            print(json.dumps(result), flush=True)
    record = {
        "model": "canary (resources/canary)",
        "task": TASK,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "question_mode": "question_aware",
        "cells": results,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "canary_agreement.json").write_text(json.dumps(record, indent=2) + "\n")
    print("| dtype | method | kept | identical answers | score @1 | score @default | diff |")
    for r in results:
        print(
            f"| {r['dtype']} | {r['method']} | {r['retention']:.0%} | {r['identical_answers_share']:.1%} | "
            f"{r['score_decode_1']:.1f} | {r[f'score_decode_{args.decode_batch}']:.1f} | {r['score_difference']:+.1f} |"
        )


if __name__ == "__main__":
    main()
