"""One example's compressed cache, detached from its cache object, ready to be stacked with others.

No pad token ever reaches a press: every example is prefilled and compressed on its own, exactly as the batch-1
engine does (``prefill``); only these snapshots are stacked (``static_decode``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from kvcache_bench.engine.caches import default_cache
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import Prefill, prefill_example, prefill_shared_context
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode


@dataclass
class PrefilledPrompt:
    """One example after its own (compressing) prefill: what decoding needs, detached from any cache object."""

    keys: list[torch.Tensor]  # per layer [1, kv_heads, kept_l, head_dim]
    values: list[torch.Tensor]
    last_logits: torch.Tensor  # [1, vocab]: the first generated token's logits (unused when held_back_ids)
    prompt_tokens: int  # original prompt length: where the RoPE positions of generated tokens start
    kept_tokens: float  # mean over layers of positions left right after compression
    pressed_tokens: int  # tokens the press saw
    seconds: float  # prefill wall time
    # Prompt tokens after the pressed ones, not yet in ``keys``: decode_together runs them for the whole
    # batch in one forward before the first generated token (empty: keys hold the whole prompt).
    held_back_ids: list[int] = field(default_factory=list)
    # RoPE position of the first held-back token; None: right after the pressed tokens. The other-question
    # mode presses tokens it then removes, so its question starts at the end of the context instead.
    held_back_start: int | None = None
    # Per layer, per KV head: how many of the layer's slots are real (right-aligned), when heads of a layer
    # keep different counts (the other-question mode removes a question's slots per head); None: all of them.
    head_lengths: list[list[int]] | None = None

    @property
    def held_back_position(self) -> int:
        return self.pressed_tokens if self.held_back_start is None else self.held_back_start

    def slot_lengths(self, layer: int) -> list[int]:
        """Real slots of each KV head of ``layer`` (one entry for all heads when they agree)."""
        return self.head_lengths[layer] if self.head_lengths is not None else [self.keys[layer].shape[-2]]


def stacking_obstacle(model, cache) -> str | None:
    from transformers import DynamicCache

    if type(cache) is not DynamicCache:
        return f"{type(cache).__name__} cannot be stacked into a batch"
    for module in model.modules():
        if getattr(module, "masked_key_indices", None) is not None:
            return "the press masks keys per head (kept count differs across heads of a layer)"
    return None


@torch.inference_mode()
def prefill_prompt(model, prompt: PromptTokens, press, mode: QuestionMode, make_cache=default_cache) -> PrefilledPrompt:
    """Prefill (and compress) one example alone, in question ``mode``: no other example's tokens reach the press.

    What the press sees in each mode: ``prefill.pressed_and_trailing``. Raises ValueError for a cache that
    cannot be stacked into a batch.
    """
    start = time.perf_counter()
    prefilled = prefilled_from_cache(model, prefill_example(model, prompt, press, mode, make_cache), prompt.length)
    synchronize(model.device)
    prefilled.seconds = time.perf_counter() - start
    return prefilled


def prefilled_from_cache(
    model, done: Prefill, prompt_tokens: int, *, copy: bool = True, held_back_ids: list[int] | None = None
) -> PrefilledPrompt:
    """Snapshot a prefilled batch-1 cache (``done``, of a prompt of ``prompt_tokens``); ``copy`` when the cache
    lives on (a shared context rolled back next).

    Raises ValueError for a cache that cannot be stacked into a batch.
    """
    obstacle = stacking_obstacle(model, done.cache)
    if obstacle is not None:
        raise ValueError(obstacle)
    layers = done.cache.layers
    keys = [layer.keys.clone() if copy else layer.keys for layer in layers]
    values = [layer.values.clone() if copy else layer.values for layer in layers]
    return PrefilledPrompt(
        keys,
        values,
        done.last_logits.clone(),
        prompt_tokens,
        done.kept_tokens,
        done.pressed_tokens,
        0.0,
        list(held_back_ids or []),
    )


def prefilled_shared_context(model, context_ids: list[int], questions: list[list[int]], press) -> list[PrefilledPrompt]:
    """Question-agnostic: the context compressed once (``prefill.prefill_shared_context``),
    one snapshot per question."""
    prefilled = []
    for question_ids, done in zip(questions, prefill_shared_context(model, context_ids, questions, press)):
        started = time.perf_counter()
        # a copy: the cache is rolled back for the next question
        snapshot = prefilled_from_cache(model, done, len(context_ids) + len(question_ids))
        synchronize(model.device)
        snapshot.seconds = done.seconds + time.perf_counter() - started
        prefilled.append(snapshot)
    return prefilled
