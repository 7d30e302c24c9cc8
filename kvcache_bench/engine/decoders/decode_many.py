"""Each example prefilled and compressed alone (question-aware), their compressed caches decoded together."""

from __future__ import annotations

from kvcache_bench.engine.batched_decode import DecodePath, generate_prefill_one_decode_many
from kvcache_bench.engine.decoders import Decoding
from kvcache_bench.engine.single_decode import Generation
from kvcache_bench.study.prompts import PromptTokens


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    return generate_prefill_one_decode_many(
        settings.model,
        prompts,
        settings.press,
        settings.mode,
        settings.max_new_tokens,
        settings.stop_ids,
        settings.decode_batch_size,
        make_cache=settings.make_cache,
        min_new_tokens=settings.min_new_tokens,
    )
