"""Each example prefilled, compressed and decoded alone: the reference every other strategy must equal."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from kvcache_bench.engine.caches import default_cache
from kvcache_bench.engine.decoders import Decoding, at_batch_one, batch_one
from kvcache_bench.engine.greedy import DecodePath, Generation, greedy_decode
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import prefill_example
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode


def alone(settings: Decoding, prompt: PromptTokens) -> Generation:
    return batch_one(settings, prompt, generate_one)


@torch.inference_mode()
def generate_one(
    model,
    prompt: PromptTokens,
    press,
    mode: QuestionMode,
    max_new_tokens: int,
    stop_ids: set[int],
    *,
    make_cache: Callable[[], object] = default_cache,
    min_new_tokens: int = 0,
) -> Generation:
    """Batch-1 greedy generation for one example, compressing the prompt with ``press`` in question ``mode``."""
    start = time.perf_counter()
    cache, last_logits, kept, pressed = prefill_example(model, prompt, press, mode, make_cache)
    generated = greedy_decode(model, cache, last_logits, prompt.length, max_new_tokens, stop_ids, min_new_tokens)
    synchronize(model.device)
    return Generation(generated, prompt.length, kept, time.perf_counter() - start, pressed)


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    return [alone(settings, prompt) for prompt in prompts], at_batch_one(settings, settings.decode_fallback)
