"""One example's compressed cache, detached from its cache object, ready to be stacked with others.

No pad token ever reaches a press: every example is prefilled and compressed on its own, exactly as the batch-1
engine does (``prefill``); only these snapshots are stacked (``static_decode``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from kvcache_bench.engine.caches import attention_modules, clear_key_masks, default_cache, has_key_masks
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
    # Per layer, the slots a masking press (AdaKV, KVzip, ...) hid: [kv_heads, slots], True where hidden, None for a
    # layer (or a press) that hid nothing. kvpress keeps these on the model's attention modules, one sequence's at a
    # time; carried here, decode_together masks them per row and KV head, as kvpress's fake keys hide them at batch 1.
    key_masks: list[torch.Tensor | None] | None = None
    # A model with sliding layers: per layer, the position each slot holds ([kv_heads, slots]) where the layer is a
    # sliding window (None for a global layer), so decode_together masks each window by positions, not slots.
    slot_positions: list[torch.Tensor | None] | None = None
    window: int | None = None  # those layers' window in positions
    kept_by_layer_type: dict[str, float] | None = None  # mean slots per layer after compression, by layer type

    @property
    def held_back_position(self) -> int:
        return self.pressed_tokens if self.held_back_start is None else self.held_back_start

    def slot_lengths(self, layer: int) -> list[int]:
        """Real slots of each KV head of ``layer`` (one entry for all heads when they agree)."""
        return self.head_lengths[layer] if self.head_lengths is not None else [self.keys[layer].shape[-2]]


def stacking_obstacle(model, cache, *, masks_carried: bool = False) -> str | None:
    """Why this prefilled cache cannot join a decode batch (None: it can). ``masks_carried``: the caller takes the
    press's per-head key masks into the snapshot (``take_key_masks``), so they are no obstacle."""
    from transformers import DynamicCache

    from kvcache_bench.engine.layered_cache import is_layered

    if type(cache) is not DynamicCache and not is_layered(cache):
        return f"{type(cache).__name__} cannot be stacked into a batch"
    if not masks_carried and has_key_masks(model):
        return "the press masks keys per head (kept count differs across heads of a layer)"
    return None


def take_key_masks(model, cache, *, clear: bool = True) -> list[torch.Tensor | None] | None:
    """The slots a masking press hid in this one-sequence ``cache``, per layer ([kv_heads, slots], True where hidden),
    taken off the model's attention modules (kvpress's ``masked_key_indices``), which are cleared (``clear``): a
    batch decoded next must not read one example's masks. A shared context's masks stay (``clear=False``) while its
    next question's prefill still needs them. None when no layer hid anything."""
    layers = cache.layers
    masks: list[torch.Tensor | None] = [None] * len(layers)
    for module in attention_modules(model):
        indices = getattr(module, "masked_key_indices", None)
        if indices is None:
            continue
        if clear:
            module.masked_key_indices = None
        keys = layers[module.layer_idx].keys
        if len(indices[0]) == 0:
            continue
        batch_indices, head_indices, slot_indices = indices[0], indices[1], indices[2]
        if bool((batch_indices != 0).any()):
            raise ValueError("key masks of more than one sequence cannot be taken from a one-sequence prefill")
        hidden = torch.zeros(keys.shape[1], keys.shape[-2], dtype=torch.bool, device=keys.device)
        hidden[head_indices, slot_indices] = True
        masks[module.layer_idx] = hidden
    return masks if any(mask is not None for mask in masks) else None


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
    model,
    done: Prefill,
    prompt_tokens: int,
    *,
    copy: bool = True,
    held_back_ids: list[int] | None = None,
    key_masks: bool = False,
    clear_masks: bool = True,
) -> PrefilledPrompt:
    """Snapshot a prefilled batch-1 cache (``done``, of a prompt of ``prompt_tokens``); ``copy`` when the cache
    lives on (a shared context rolled back next); ``key_masks``: take a masking press's masks into the snapshot
    (``take_key_masks``), off the model unless ``clear_masks`` is False (a later pass on this cache needs them).

    Raises ValueError for a cache that cannot be stacked into a batch.
    """
    obstacle = stacking_obstacle(model, done.cache, masks_carried=key_masks)
    if obstacle is not None:
        raise ValueError(obstacle)
    from kvcache_bench.engine.layered_cache import is_layered

    masks = take_key_masks(model, done.cache, clear=clear_masks) if key_masks else None
    layers = done.cache.layers
    keys = [layer.keys.clone() if copy else layer.keys for layer in layers]
    values = [layer.values.clone() if copy else layer.values for layer in layers]
    windows = {}
    if is_layered(done.cache):  # positions are never changed in place: no copy needed
        windows = {"slot_positions": list(done.cache.slot_positions), "window": done.cache.layer_types.window}
    return PrefilledPrompt(
        keys,
        values,
        done.last_logits.clone(),
        prompt_tokens,
        done.kept_tokens,
        done.pressed_tokens,
        0.0,
        list(held_back_ids or []),
        key_masks=masks,
        kept_by_layer_type=done.kept_by_layer_type,
        **windows,
    )


def prefilled_shared_context(
    model, context_ids: list[int], questions: list[list[int]], press, make_cache=default_cache
) -> list[PrefilledPrompt]:
    """Question-agnostic: the context compressed once (``prefill.prefill_shared_context``),
    one snapshot per question.

    A masking press's masks (AdaKV, KVzip) hide context slots from every question's prefill, as kvpress's fake keys
    do at batch 1: they stay on the model until the last question, and each snapshot carries a copy, so the rows
    decode together, each hiding its context's slots."""
    prefilled = []
    for question_ids, done in zip(questions, prefill_shared_context(model, context_ids, questions, press, make_cache)):
        started = time.perf_counter()
        # a copy: the cache is rolled back for the next question
        snapshot = prefilled_from_cache(
            model, done, len(context_ids) + len(question_ids), key_masks=True, clear_masks=False
        )
        synchronize(model.device)
        snapshot.seconds = done.seconds + time.perf_counter() - started
        prefilled.append(snapshot)
    clear_key_masks(model)  # the next context's prefill (or a decode batch) must not read these
    return prefilled
