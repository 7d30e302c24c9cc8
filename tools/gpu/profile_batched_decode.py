"""Where a decode step's time goes at decode batch 16 (random-init Llama-3.1-8B shape, snapkv 50%, ~5k tokens).

    python tools/gpu/profile_batched_decode.py --out "$OUT"

Prefills 16 prompts one by one, then profiles ``decode_together`` for a few steps with torch.profiler and
writes the operator table (sorted by CUDA time) and the wall time per step.

No rule does this: no rule runs torch.profiler; rules time whole cells, not where a step's time goes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_common import random_prompts  # noqa: E402

from kvcache_bench.data.model_shapes import LLAMA_31_8B_SHAPE as LLAMA_31_8B  # noqa: E402
from kvcache_bench.data.model_shapes import TINY_LLAMA_SHAPE as TINY  # noqa: E402
from kvcache_bench.data.model_shapes import build_random_model  # noqa: E402
from kvcache_bench.engine.prefilled import prefill_prompt  # noqa: E402
from kvcache_bench.engine.static_decode import decode_together  # noqa: E402
from kvcache_bench.methods.registry import build_press  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = TINY if args.tiny else LLAMA_31_8B
    model = build_random_model(shape, torch.bfloat16 if device.type == "cuda" else torch.float32, device, 0)
    prompts = random_prompts(args.rows, 300 if args.tiny else 5000, shape["vocab_size"], 0)
    press = build_press("snapkv", 0.5, seed=0)
    prefilled = [prefill_prompt(model, p, press, "question_aware") for p in prompts]
    decode_together(model, prefilled, 4, set())  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    decode_together(model, prefilled, args.steps, set())
    if device.type == "cuda":
        torch.cuda.synchronize()
    per_step = (time.perf_counter() - started) / args.steps
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else []
    )
    with torch.profiler.profile(activities=activities) as profiler:
        decode_together(model, prefilled, args.steps, set())
        if device.type == "cuda":
            torch.cuda.synchronize()
    sort_key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    table = profiler.key_averages().table(sort_by=sort_key, row_limit=30)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    report = f"rows={args.rows} steps={args.steps} wall per step={per_step * 1e3:.1f} ms\n\n{table}\n"
    (Path(args.out) / "profile_batched_decode.txt").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
