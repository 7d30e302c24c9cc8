"""Each example prefilled, compressed and decoded alone: the reference every other strategy must equal."""

from __future__ import annotations

import time

import torch

from kvcache_bench.engine.decoders import Decoding, at_batch_one
from kvcache_bench.engine.greedy import DecodePath, Generation, greedy_decode
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import prefill_example
from kvcache_bench.study.prompt_tokens import PromptTokens


@torch.inference_mode()
def generate_one(settings: Decoding, prompt: PromptTokens) -> Generation:
    """Batch-1 greedy generation for one example, compressing the prompt with the press in the question mode."""
    start = time.perf_counter()
    done = prefill_example(settings.model, prompt, settings.press, settings.mode, settings.make_cache)
    generated = greedy_decode(settings, done.cache, done.last_logits, prompt.length)
    synchronize(settings.model.device)
    seconds = time.perf_counter() - start
    kept, by_type = done.kept_tokens, done.kept_by_layer_type
    return Generation(generated, prompt.length, kept, seconds, done.pressed_tokens, kept_by_layer_type=by_type)


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    return [generate_one(settings, prompt) for prompt in prompts], at_batch_one(settings)
