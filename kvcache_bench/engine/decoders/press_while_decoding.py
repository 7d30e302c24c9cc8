"""Each example alone, the press active over its question and its decoding (kvpress's decoding presses)."""

from __future__ import annotations

from kvcache_bench.engine.batched_decode import DecodePath
from kvcache_bench.engine.decoders import Decoding, at_batch_one
from kvcache_bench.engine.single_decode import Generation, generate_one_pressing_while_decoding
from kvcache_bench.study.prompts import PromptTokens

WHILE_DECODING_FALLBACK = (
    "the press compresses while decoding, and its hooks keep one sequence's step counts and hidden states: "
    "decoded at batch 1"
)


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    generations = [
        generate_one_pressing_while_decoding(
            settings.model,
            prompt,
            settings.press,
            settings.mode,
            settings.max_new_tokens,
            settings.stop_ids,
            make_cache=settings.make_cache,
            min_new_tokens=settings.min_new_tokens,
        )
        for prompt in prompts
    ]
    return generations, at_batch_one(settings, WHILE_DECODING_FALLBACK)
