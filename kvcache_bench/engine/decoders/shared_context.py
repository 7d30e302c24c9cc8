"""A context compressed once (question-agnostic), each of its questions decoded alone from a copy of its cache."""

from __future__ import annotations

import time

import torch

from kvcache_bench.engine.decoders import Decoding
from kvcache_bench.engine.decoders.one_by_one import generate_one
from kvcache_bench.engine.greedy import DecodePath, Generation, greedy_decode
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import prefill_shared_context
from kvcache_bench.study.prompt_tokens import PromptTokens


def fallback(settings: Decoding) -> str | None:
    """Decode batching was asked for, but these caches cannot be stacked with others (a quantised cache: the one
    question-agnostic cell ``choose_strategy`` decodes alone)."""
    if settings.decode_batch_size <= 1:
        return None
    return "quantised cache: decoded at batch 1"


@torch.inference_mode()
def generate_shared_context(settings: Decoding, context_ids: list[int], questions: list[list[int]]) -> list[Generation]:
    """Question-agnostic generation: compress ``context_ids`` once, answer every question from that cache.

    After each answer the cache is rolled back to the compressed context, so every question sees
    exactly what it would see had the context been compressed for it alone. The compression's time
    is shared equally among the questions.
    """
    generations = []
    model = settings.model
    prefilled = prefill_shared_context(model, context_ids, questions, settings.press, settings.make_cache)
    for question_ids, done in zip(questions, prefilled):
        started = time.perf_counter()
        prompt_length = len(context_ids) + len(question_ids)
        generated = greedy_decode(settings, done.cache, done.last_logits, prompt_length)
        synchronize(model.device)
        seconds = done.seconds + time.perf_counter() - started
        generations.append(
            Generation(
                generated,
                prompt_length,
                done.kept_tokens,
                seconds,
                len(context_ids),
                len(questions),
                kept_by_layer_type=done.kept_by_layer_type,
            )
        )
    return generations


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    path = DecodePath(settings.decode_batch_size, 1, fallback(settings))
    if len(prompts) == 1:
        return [generate_one(settings, prompts[0])], path
    return generate_shared_context(settings, prompts[0].context_ids, [p.question_ids for p in prompts]), path
