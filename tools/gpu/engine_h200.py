"""Run the generation engine on one GPU with a random-init model of Llama-3.1-8B's exact shape.

Builds the model directly on the device (bf16, no download, nothing saved), feeds ~5k-token prompts of
random token ids (no tokenizer needed: the engine works on token ids), and runs the full cache and
three presses (snapkv, streaming_llm, knorm at 50% retention) in both question modes. Writes a JSON of
peak memory (torch.cuda.max_memory_allocated) and seconds per example.

    python tools/gpu/engine_h200.py --out "$OUT/engine_h200.json"      # on the GPU machine
    python tools/gpu/engine_h200.py --tiny --out /tmp/engine_tiny.json # a small shape, runs on CPU

Random weights answer nothing, so stop tokens are ignored: every example generates exactly
--max-new-tokens tokens and the timings are comparable across methods.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvcache_bench.generation.model_shapes import LLAMA_31_8B_SHAPE as LLAMA_31_8B  # noqa: E402
from kvcache_bench.generation.model_shapes import TINY_LLAMA_SHAPE  # noqa: E402
from kvcache_bench.generation.single_decode import generate_one, generate_shared_context  # noqa: E402
from kvcache_bench.methods.registry import build_press  # noqa: E402
from kvcache_bench.study.prompts import PromptTokens  # noqa: E402

TINY = {**TINY_LLAMA_SHAPE, "vocab_size": 512}
METHODS = (("full_cache", 1.0), ("snapkv", 0.5), ("streaming_llm", 0.5), ("knorm", 0.5))
QUESTION_MODES = ("question_aware", "question_agnostic")


def build_model(shape: dict, device: torch.device, dtype: torch.dtype):
    """Random-init weights allocated straight on ``device`` in ``dtype`` (8B in bf16 is ~16 GB)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**copy.deepcopy(shape))  # LlamaConfig writes into rope_scaling
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def random_ids(generator: torch.Generator, length: int, vocab_size: int) -> list[int]:
    """Ids clear of the special tokens (Llama 3's sit at the top of the vocabulary, from 128000)."""
    return torch.randint(3, min(vocab_size, 128000), (length,), generator=generator).tolist()


def run_setting(model, contexts, questions, method, retention, mode, max_new_tokens):
    press = build_press(method, retention)
    device = model.device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    generations = []
    for context, context_questions in zip(contexts, questions):
        if mode == "question_agnostic":
            generations += generate_shared_context(model, context, context_questions, press, max_new_tokens, set())
        else:
            for question in context_questions:
                prompt = PromptTokens(context, question)
                generations.append(generate_one(model, prompt, press, "question_aware", max_new_tokens, set()))
    wall = time.perf_counter() - started
    return {
        "method": method,
        "retention": retention,
        "question_mode": mode,
        "examples": len(generations),
        "prompt_tokens_mean": sum(g.prompt_tokens for g in generations) / len(generations),
        "kept_tokens_mean": sum(g.kept_tokens for g in generations) / len(generations),
        "effective_retention_mean": sum(g.kept_tokens / g.pressed_tokens for g in generations) / len(generations),
        "generated_tokens_mean": sum(len(g.token_ids) for g in generations) / len(generations),
        "seconds_per_example": wall / len(generations),
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model of the same family and short prompts (CPU check)")
    parser.add_argument("--context-tokens", type=int, default=None, help="default 5000 (tiny: 200)")
    parser.add_argument("--question-tokens", type=int, default=32)
    parser.add_argument("--contexts", type=int, default=3)
    parser.add_argument("--questions-per-context", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default 32 (tiny: 4)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    context_tokens = args.context_tokens or (200 if args.tiny else 5000)
    max_new_tokens = args.max_new_tokens or (4 if args.tiny else 32)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = TINY if args.tiny else LLAMA_31_8B
    torch.manual_seed(args.seed)
    built = time.perf_counter()
    model = build_model(shape, device, dtype)
    build_seconds = time.perf_counter() - built
    generator = torch.Generator().manual_seed(args.seed)
    contexts = [random_ids(generator, context_tokens, shape["vocab_size"]) for _ in range(args.contexts)]
    questions = [
        [random_ids(generator, args.question_tokens, shape["vocab_size"]) for _ in range(args.questions_per_context)]
        for _ in contexts
    ]
    # Warm-up (kernels, allocator) so the first measured setting is not charged for it.
    run_setting(model, contexts[:1], [questions[0][:1]], "full_cache", 1.0, "question_aware", 2)
    results = [
        run_setting(model, contexts, questions, method, retention, mode, max_new_tokens)
        for method, retention in METHODS
        for mode in QUESTION_MODES
    ]
    import kvpress
    import transformers

    report = {
        "model": "random-init Llama-3.1-8B shape" if not args.tiny else "random-init tiny Llama (--tiny)",
        "shape": {k: v for k, v in shape.items() if k not in ("bos_token_id", "eos_token_id")},
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(dtype).removeprefix("torch."),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "model_build_seconds": build_seconds,
        "context_tokens": context_tokens,
        "question_tokens": args.question_tokens,
        "contexts": args.contexts,
        "questions_per_context": args.questions_per_context,
        "max_new_tokens": max_new_tokens,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "kvpress": getattr(kvpress, "__version__", "?")},
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for row in results:
        memory = f"{row['peak_memory_gib']:.2f} GiB" if row["peak_memory_gib"] is not None else "n/a"
        print(f"{row['method']:<14} {row['question_mode']:<18} {row['seconds_per_example']:.3f} s/example  peak {memory}")
    return report


if __name__ == "__main__":
    main()
