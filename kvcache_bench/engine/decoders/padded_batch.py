"""Left-padded prompts prefilled and decoded together: only for methods that keep every token (the pads would be
ranked with the text otherwise: the published run's 48.3 -> 15.7)."""

from __future__ import annotations

from kvcache_bench.engine.batched_decode import DecodePath
from kvcache_bench.engine.decoders import Decoding, at_batch_one
from kvcache_bench.engine.single_decode import Generation, generate_padded_batch
from kvcache_bench.study.prompts import PromptTokens


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    generations = generate_padded_batch(
        settings.model,
        prompts,
        settings.press,
        settings.pad_token_id,
        settings.max_new_tokens,
        settings.stop_ids,
        make_cache=settings.make_cache,
    )
    return generations, at_batch_one(settings, settings.decode_fallback)
