"""Left-padded prompts prefilled and decoded together: only for methods that keep every token (the pads would be
ranked with the text otherwise: the published run's 48.3 -> 15.7)."""

from __future__ import annotations

import time

import torch

from kvcache_bench.engine.caches import mean_cache_length
from kvcache_bench.engine.decoders import Decoding, at_batch_one
from kvcache_bench.engine.greedy import DecodePath, Generation, decode_answer
from kvcache_bench.engine.prefill import press_context
from kvcache_bench.study.prompt_tokens import PromptTokens


def left_padded_batch(rows: list[list[int]], pad_token_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of ``rows`` left-padded to the longest, as a batching harness builds them."""
    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for row, ids in enumerate(rows):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, device=device)
        mask[row, width - len(ids) :] = 1
    return input_ids, mask


@torch.inference_mode()
def generate_padded_batch(settings: Decoding, prompts: list[PromptTokens]) -> list[Generation]:
    """Left-padded batched generation the way a batching harness does it: ``model.generate`` under the press.

    Correct for the full cache. With an evicting ``press`` this reproduces the padding collapse: the
    press ranks pad positions alongside real ones, and ``generate`` keeps masking the first columns of
    the (now compressed) cache as if they were still the pads. It is kept only so tests and the canary's
    report card can show that; ``checks.py`` refuses such targets.
    """
    start = time.perf_counter()
    model, pad_token_id, stop_ids = settings.model, settings.pad_token_id, settings.stop_ids
    full = [p.context_ids + p.question_ids for p in prompts]
    input_ids, mask = left_padded_batch(full, pad_token_id, model.device)
    width = input_ids.shape[1]
    cache = settings.make_cache()
    with press_context(settings.press, model):
        output = model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            past_key_values=cache,
            max_new_tokens=settings.max_new_tokens,
            do_sample=False,
            pad_token_id=pad_token_id,
            eos_token_id=sorted(stop_ids) or None,
        )
    new_tokens = output[:, width:].tolist()
    kept = mean_cache_length(cache) - (len(new_tokens[0]) - 1)  # each token but the last went into the cache
    generations = []
    seconds = (time.perf_counter() - start) / len(full)
    for ids, tokens in zip(full, new_tokens):
        stop_at = next((i for i, token in enumerate(tokens) if token in stop_ids), len(tokens) - 1)
        generations.append(Generation(tokens[: stop_at + 1], len(ids), min(kept, len(ids)), seconds, len(ids)))
    return generations


def padded_batch_answers(settings: Decoding, tokenizer, prompts: list[PromptTokens], batch_size: int) -> list[str]:
    """Decoded answers of the batching harness (``generate_padded_batch``) over consecutive batches of ``prompts``."""
    answers = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start : start + batch_size]
        for generation in generate_padded_batch(settings, chunk):
            answers.append(decode_answer(tokenizer, generation.token_ids))
    return answers


def decode(settings: Decoding, prompts: list[PromptTokens], others=None) -> tuple[list[Generation], DecodePath]:
    return generate_padded_batch(settings, prompts), at_batch_one(settings)
