"""Contexts compressed once each (question-agnostic), all their questions decoded together."""

from __future__ import annotations

from kvcache_bench.engine.batched_decode import DecodePath, generate_shared_contexts_together
from kvcache_bench.engine.decoders import Decoding, in_prompt_order, shared_context_groups
from kvcache_bench.engine.single_decode import Generation
from kvcache_bench.study.prompts import PromptTokens


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    groups = shared_context_groups(prompts)
    generations, path = generate_shared_contexts_together(
        settings.model,
        [[prompts[i] for i in group] for group in groups],
        settings.press,
        settings.max_new_tokens,
        settings.stop_ids,
        settings.decode_batch_size,
        min_new_tokens=settings.min_new_tokens,
    )
    return in_prompt_order(groups, generations), path
