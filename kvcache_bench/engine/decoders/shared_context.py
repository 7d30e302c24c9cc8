"""A context compressed once (question-agnostic), each of its questions decoded alone from a copy of its cache."""

from __future__ import annotations

from kvcache_bench.engine.batched_decode import DecodePath
from kvcache_bench.engine.decoders import Decoding
from kvcache_bench.engine.decoders.one_by_one import alone
from kvcache_bench.engine.single_decode import Generation, generate_shared_context
from kvcache_bench.study.prompts import PromptTokens


def fallback(settings: Decoding) -> str | None:
    """Decode batching was asked for, but these caches cannot be stacked with others."""
    if settings.decode_batch_size <= 1:
        return None
    return settings.decode_fallback or "quantised cache: decoded at batch 1"


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    path = DecodePath(settings.decode_batch_size, 1, fallback(settings))
    if len(prompts) == 1:
        return [alone(settings, prompts[0])], path
    generations = generate_shared_context(
        settings.model,
        prompts[0].context_ids,
        [p.question_ids for p in prompts],
        settings.press,
        settings.max_new_tokens,
        settings.stop_ids,
        make_cache=settings.make_cache,
        min_new_tokens=settings.min_new_tokens,
    )
    return generations, path
