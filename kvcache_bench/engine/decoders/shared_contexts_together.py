"""Contexts compressed once each (question-agnostic), all their questions decoded together."""

from __future__ import annotations

import torch

from kvcache_bench.engine.decoders import Decoding, in_prompt_order, shared_context_groups
from kvcache_bench.engine.greedy import DecodePath, Generation
from kvcache_bench.engine.prefilled import PrefilledPrompt, prefilled_shared_context
from kvcache_bench.engine.static_decode import decode_together_timed
from kvcache_bench.study.prompt_tokens import PromptTokens


@torch.inference_mode()
def generate_shared_contexts_together(
    settings: Decoding, groups: list[list[PromptTokens]]
) -> tuple[list[Generation], DecodePath]:
    """Question-agnostic decode batching: each group's context is compressed once, then every question
    of every group is decoded together. Generations come back group by group, in question order."""
    model = settings.model
    prefilled: list[PrefilledPrompt] = []
    sizes: list[int] = []
    for group in groups:
        prefilled += prefilled_shared_context(
            model, group[0].context_ids, [p.question_ids for p in group], settings.press, settings.make_cache
        )
        sizes += [len(group)] * len(group)
    decoded = decode_together_timed(
        model, prefilled, settings.max_new_tokens, settings.stop_ids, settings.min_new_tokens
    )
    share, capture = decoded.shares()
    generations = [
        Generation(
            token_ids,
            p.prompt_tokens,
            p.kept_tokens,
            p.seconds + share,
            p.pressed_tokens,
            size,
            graph_capture_seconds=capture,
            kept_by_layer_type=p.kept_by_layer_type,
        )
        for p, token_ids, size in zip(prefilled, decoded.token_ids, sizes)
    ]
    return generations, DecodePath(settings.decode_batch_size, len(prefilled), None)


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    groups = shared_context_groups(prompts)
    generations, path = generate_shared_contexts_together(settings, [[prompts[i] for i in group] for group in groups])
    return in_prompt_order(groups, generations), path
