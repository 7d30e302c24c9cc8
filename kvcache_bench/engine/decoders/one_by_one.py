"""Each example prefilled, compressed and decoded alone: the reference every other strategy must equal."""

from __future__ import annotations

from kvcache_bench.engine.batched_decode import DecodePath
from kvcache_bench.engine.decoders import Decoding, at_batch_one
from kvcache_bench.engine.single_decode import Generation, generate_one
from kvcache_bench.study.prompts import PromptTokens


def alone(settings: Decoding, prompt: PromptTokens) -> Generation:
    return generate_one(
        settings.model,
        prompt,
        settings.press,
        settings.mode,
        settings.max_new_tokens,
        settings.stop_ids,
        make_cache=settings.make_cache,
        min_new_tokens=settings.min_new_tokens,
    )


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    return [alone(settings, prompt) for prompt in prompts], at_batch_one(settings, settings.decode_fallback)
