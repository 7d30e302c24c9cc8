"""Prefill one, decode many on one H200: examples/s of a snapkv-50% quality pass at decode batch 16 vs 1.

A random-init model of Llama-3.1-8B's exact shape is built on the GPU in bf16 (no download, nothing
saved) and fed seeded random prompts of about 5k tokens. Generation length is pinned (no stop tokens:
the weights are random), so both decode batch sizes do the same work. Then, in fp32 on a few shorter
prompts, the generated ids at decode batch 4 are checked against the batch-1 engine, token for token.

    python tools/gpu/batched_decode_h200.py --out "$OUT"         # on the GPU (tools/gpu/batched_decode_h200.sh)
    python tools/gpu/batched_decode_h200.py --tiny --out /tmp/bd  # a 2-layer stand-in on CPU, in seconds

Writes batched_decode_h200.json under --out.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvcache_bench.generation.batched_decode import generate_prefill_one_decode_many  # noqa: E402
from kvcache_bench.generation.model_shapes import LLAMA_31_8B_SHAPE as LLAMA_31_8B  # noqa: E402
from kvcache_bench.generation.model_shapes import TINY_LLAMA_SHAPE as TINY  # noqa: E402
from kvcache_bench.generation.model_shapes import build_random_model  # noqa: E402
from kvcache_bench.generation.single_decode import generate_one  # noqa: E402
from kvcache_bench.methods.registry import build_press  # noqa: E402
from kvcache_bench.study.prompts import PromptTokens  # noqa: E402

log = logging.getLogger("batched_decode_h200")


FULL_RUN = dict(examples=32, prompt_tokens=5000, new_tokens=64, decode_batch=16,
                exact_examples=4, exact_prompt_tokens=1500, exact_new_tokens=32, exact_decode_batch=4)
TINY_RUN = dict(examples=6, prompt_tokens=300, new_tokens=8, decode_batch=4,
                exact_examples=3, exact_prompt_tokens=150, exact_new_tokens=6, exact_decode_batch=3)
QUESTION_TOKENS = 32
METHOD, RETENTION = "snapkv", 0.5


def random_prompts(count: int, mean_tokens: int, vocab_size: int, seed: int) -> list[PromptTokens]:
    """Lengths spread +-10% around ``mean_tokens`` so every decode batch is padded unevenly."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        length = int(mean_tokens * (0.9 + 0.2 * torch.rand((), generator=generator).item()))
        ids = torch.randint(3, vocab_size, (length,), generator=generator).tolist()
        context, question = ids[: length - QUESTION_TOKENS], ids[length - QUESTION_TOKENS :]
        prompts.append(PromptTokens(context, question))
    return prompts


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_pass(model, prompts, new_tokens: int, decode_batch: int) -> dict:
    synchronize(model.device)
    start = time.perf_counter()
    generations, path = generate_prefill_one_decode_many(
        model, prompts, build_press(METHOD, RETENTION, seed=0), "question_aware", new_tokens, set(), decode_batch
    )
    synchronize(model.device)
    seconds = time.perf_counter() - start
    assert all(len(g.token_ids) == new_tokens for g in generations), "generation length must be pinned"
    return {
        "decode_batch_size": decode_batch,
        **path.record(),
        "seconds": seconds,
        "examples_per_s": len(prompts) / seconds,
        "generated_tokens_per_s": len(prompts) * new_tokens / seconds,
        "token_ids": [g.token_ids for g in generations],
    }


def exact_match_check(model, prompts, new_tokens: int, decode_batch: int) -> dict:
    """fp32: ids from the batch-1 engine (engine.generate_one) vs decode batch ``decode_batch``."""
    press = build_press(METHOD, RETENTION, seed=0)
    reference = [generate_one(model, p, press, "question_aware", new_tokens, set()).token_ids for p in prompts]
    generations, path = generate_prefill_one_decode_many(
        model, prompts, build_press(METHOD, RETENTION, seed=0), "question_aware", new_tokens, set(), decode_batch
    )
    batched = [g.token_ids for g in generations]
    first_mismatch = [
        next((k for k, (a, b) in enumerate(zip(r, t)) if a != b), None) for r, t in zip(reference, batched)
    ]
    return {
        "dtype": "float32",
        "examples": len(prompts),
        "prompt_tokens": [len(p.context_ids) + len(p.question_ids) for p in prompts],
        "new_tokens": new_tokens,
        **path.record(),
        "identical": reference == batched,
        "first_mismatch_step_per_example": first_mismatch,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true", help="2-layer stand-in (CPU test)")
    parser.add_argument("--seed", type=int, default=0)
    for key, value in FULL_RUN.items():
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None, help=f"default {value} ({TINY_RUN[key]} with --tiny)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in (TINY_RUN if args.tiny else FULL_RUN).items()}
    shape = TINY if args.tiny else LLAMA_31_8B
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # fp32 means fp32: no TF32 shortcuts in the exactness check
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    started = time.perf_counter()
    dtype = torch.float32 if args.tiny else torch.bfloat16
    model = build_random_model(shape, dtype, device, args.seed)
    log.info("model built on %s in %.1fs", device, time.perf_counter() - started)
    prompts = random_prompts(run["examples"], run["prompt_tokens"], shape["vocab_size"], args.seed + 1)
    warmup = random_prompts(2, run["prompt_tokens"], shape["vocab_size"], args.seed + 2)
    timed_pass(model, warmup, 4, 1)
    timed_pass(model, warmup, 4, 2)
    passes = {}
    for decode_batch in (1, run["decode_batch"]):
        passes[decode_batch] = timed_pass(model, prompts, run["new_tokens"], decode_batch)
        log.info("decode batch %d: %.3f examples/s", decode_batch, passes[decode_batch]["examples_per_s"])
    if device.type == "cuda":
        peak_gib = torch.cuda.max_memory_allocated(device) / 2**30
    else:
        peak_gib = None
    one, many = passes[1], passes[run["decode_batch"]]
    agreement = sum(a == b for a, b in zip(one["token_ids"], many["token_ids"])) / len(prompts)

    model = model.float()  # the exactness check runs in fp32
    exact_prompts = random_prompts(run["exact_examples"], run["exact_prompt_tokens"], shape["vocab_size"], args.seed + 3)
    exact = exact_match_check(model, exact_prompts, run["exact_new_tokens"], run["exact_decode_batch"])
    log.info("fp32 exact match at decode batch %d: %s", run["exact_decode_batch"], exact["identical"])

    record = {
        "model": "random-init Llama-3.1-8B shape" if not args.tiny else "tiny random Llama (--tiny)",
        "shape": shape,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "method": METHOD,
        "retention": RETENTION,
        "question_mode": "question_aware",
        "run": run,
        "throughput_dtype": str(dtype).removeprefix("torch."),
        "batch_1": {k: v for k, v in one.items() if k != "token_ids"},
        "batch_many": {k: v for k, v in many.items() if k != "token_ids"},
        "speedup_examples_per_s": many["examples_per_s"] / one["examples_per_s"],
        "throughput_passes_identical_rows_fraction": agreement,
        "peak_gpu_memory_gib": peak_gib,
        "exact_match_fp32": exact,
        "total_seconds": time.perf_counter() - started,
    }
    (out / "batched_decode_h200.json").write_text(json.dumps(record, indent=2) + "\n")
    log.info("speedup %.2fx; wrote %s", record["speedup_examples_per_s"], out / "batched_decode_h200.json")
    return 0 if exact["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
