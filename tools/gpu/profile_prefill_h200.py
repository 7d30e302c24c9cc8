"""Where one example's prefill goes (random-init Llama-3.1-8B shape, bf16, SnapKV 50% question-aware, ~5k tokens).

    python tools/gpu/profile_prefill_h200.py --out "$OUT"          # on the GPU
    python tools/gpu/profile_prefill_h200.py --tiny --out /tmp/pp  # CPU rehearsal

Per example, synchronised phases: the bare forward (no press), the forward under the press, the held-back
last token on the compressed cache, the snapshot for batching; then a torch.profiler table of two
examples' ``prefill.prefill_example``. Writes profile_prefill_h200.txt.

No rule does this: no rule runs torch.profiler or times prefill's phases apart; rules time whole cells.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_common import random_prompts  # noqa: E402

from kvcache_bench.data.model_shapes import LLAMA_31_8B_SHAPE, TINY_LLAMA_SHAPE, build_random_model  # noqa: E402
from kvcache_bench.engine.prefill import Prefill, prefill, prefill_example  # noqa: E402
from kvcache_bench.engine.prefilled import prefilled_from_cache  # noqa: E402
from kvcache_bench.methods.registry import build_press  # noqa: E402


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--examples", type=int, default=10)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    shape = TINY_LLAMA_SHAPE if args.tiny else LLAMA_31_8B_SHAPE
    model = build_random_model(shape, torch.bfloat16 if device.type == "cuda" else torch.float32, device, 0)
    tokens = 300 if args.tiny else 5000
    prompts = random_prompts(args.examples + 2, tokens, shape["vocab_size"], seed=0)
    press = build_press("snapkv", 0.5, seed=0)
    from transformers import DynamicCache

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    phases = {
        "bare forward (no press)": [],
        "forward under snapkv": [],
        "held-back last token": [],
        "snapshot for batching": [],
        "prefill_example total": [],
    }
    held = []
    for index, prompt in enumerate(prompts):
        ids = prompt.context_ids + prompt.question_ids
        sync()
        t0 = time.perf_counter()
        prefill(model, DynamicCache(), ids[:-1], None)
        sync()
        t1 = time.perf_counter()
        cache = DynamicCache()
        logits = prefill(model, cache, ids[:-1], press)
        sync()
        t2 = time.perf_counter()
        logits = prefill(model, cache, ids[-1:], None, start_position=len(ids) - 1)
        sync()
        t3 = time.perf_counter()
        held.append(prefilled_from_cache(model, Prefill(cache, logits, 0.0, len(ids) - 1), len(ids), copy=False))
        sync()
        t4 = time.perf_counter()
        prefill_example(model, prompt, press, "question_aware")
        sync()
        t5 = time.perf_counter()
        if index >= 2:  # the first two warm up
            for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                phases[name].append(seconds)
    lines = [
        f"allocator: PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '(default)')}; "
        f"{args.examples} prompts of ~{tokens} tokens (median ms, min-max)"
    ]
    for name, values in phases.items():
        lines.append(
            f"{name:<32} {statistics.median(values) * 1e3:8.1f}  ({min(values) * 1e3:.1f}-{max(values) * 1e3:.1f})"
        )
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else []
    )
    with torch.profiler.profile(activities=activities) as profiler:
        for prompt in prompts[:2]:
            prefill_example(model, prompt, press, "question_aware")
        sync()
    sort_key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    lines.append(profiler.key_averages().table(sort_by=sort_key, row_limit=25))
    report = "\n".join(lines) + "\n"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    name = (
        "profile_prefill_h200"
        + ("_expandable" if "expandable" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") else "")
        + ".txt"
    )
    (Path(args.out) / name).write_text(report)
    print("\n".join(lines[: len(phases) + 1]))


if __name__ == "__main__":
    main()
