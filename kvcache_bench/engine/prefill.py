"""Prefill: prompt tokens into a cache, compressed under a press, for one example or one context's questions.

Tokens the press did not see run afterwards on the compressed cache at their ORIGINAL positions, so the
first answer token never reads the full-attention pass.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from kvcache_bench.engine.caches import (
    CacheCheckpoint,
    cache_lengths,
    clear_key_masks,
    default_cache,
    mean_cache_length,
)
from kvcache_bench.engine.host_positions import cache_positions, forward_replaced, install
from kvcache_bench.engine.layer_types import layer_types_of, press_on_pressed_layers
from kvcache_bench.engine.layered_cache import is_layered, run_appended
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.sync_free_scores import sync_free_scores
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode


@dataclass
class Prefill:
    """One prompt after its prefill: the cache, the logits its first answer token is chosen from, and what the press
    kept and saw."""

    cache: object
    last_logits: torch.Tensor  # [1, vocab]
    kept_tokens: float  # mean over the pressed layers of positions left in the cache right after compression
    pressed_tokens: int  # tokens the press saw
    seconds: float = 0.0  # set where the prefill is timed on its own (a shared context's share included)
    kept_by_layer_type: dict[str, float] | None = None  # a model with sliding layers: mean slots per layer, by type


def press_context(press, model):
    """The press's context manager on ``model``, over a model holding no earlier compression's key masks, hooking the
    layers the model's ``LayerTypes`` give a press (every layer but the sliding ones a study keeps whole)."""
    if press is None:
        return contextlib.nullcontext()
    clear_key_masks(model)
    return press_on_pressed_layers(press, model)


def kept_after_compression(cache) -> tuple[float, dict[str, float] | None]:
    """(mean slots over the layers a press compresses, mean slots per layer type or None): what a record says the
    cache kept. A model's sliding layers kept whole are left out of the first: a cell's retention is measured on what
    its press compresses."""
    if is_layered(cache):
        return cache.pressed_layers_mean(), cache.kept_by_layer_type()
    return mean_cache_length(cache), None


def _on_device(ids: list[list[int]], device: torch.device) -> torch.Tensor:
    """Token ids on ``device``. To a GPU through pinned memory, without a wait: a copy from ordinary host memory waits
    for every kernel queued before it, and would stop a decode batch's next prefill from being launched while the GPU
    still runs the last one (``engine.example_clock``)."""
    ids = torch.tensor(ids)
    if device.type != "cuda":
        return ids.to(device)
    return ids.pin_memory().to(device, non_blocking=True)


def prefill(model, cache, token_ids: list[int], press=None, start_position: int = 0):
    """Run ``token_ids`` at positions start_position.. into ``cache`` (compressing if ``press``); last logits."""
    if is_layered(cache):
        return _prefill_layered(model, cache, token_ids, press, start_position)
    if layer_types_of(model).has_sliding_layers and type(cache).__name__ == "DynamicCache":
        # its windows would be masked by slots: a harness defect, never a result (layered_cache.new_cache makes it)
        raise TypeError("a model with sliding-window layers prefills into its LayeredCache, not a plain DynamicCache")
    return _prefill_uniform(model, cache, token_ids, press, start_position)


def _prefill_uniform(model, cache, token_ids: list[int], press, start_position: int):
    """``prefill`` on a cache whose every layer is global: transformers' own masks, from the cache's slots."""
    device = model.device
    if press is None and len(token_ids) > 1 and len(set(cache_lengths(cache))) > 1:
        # Layers of unequal length (PyramidKV) break the one causal mask a block of queries needs;
        # one token at a time needs no mask and computes the same thing.
        for offset, token in enumerate(token_ids):
            logits = prefill(model, cache, [token], None, start_position + offset)
        return logits
    positions = torch.arange(start_position, start_position + len(token_ids), device=device).unsqueeze(0)
    past_seen = cache.get_seq_length()
    if start_position == 0 and past_seen == 0:
        # An empty cache's positions are transformers' own (0..n-1): left implicit, as kvpress's pipeline leaves
        # them. A press that runs the prompt again inside its hook (KVCompose) passes the caller's arguments on,
        # and explicit positions would put that second pass at 0..n-1 rather than after the prompt (n..2n-1).
        positions = None
    # SnapKV's scores keep their maximum on the device: no host sync per layer (engine.sync_free_scores)
    with press_context(press, model), sync_free_scores(press):
        extra = {}
        if press is not None and isinstance(past_seen, int) and not forward_replaced(model):
            # the cache positions transformers would make, their last value known on the host: the press's hooks ask
            # whether this pass is the prefill without a GPU sync per layer (engine.host_positions)
            install()
            extra["cache_position"] = cache_positions(past_seen, len(token_ids), device)
        outputs = model(
            input_ids=_on_device([token_ids], device),
            past_key_values=cache,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
    return outputs.logits[:, -1]


def _prefill_layered(model, cache, token_ids: list[int], press, start_position: int):
    """``prefill`` on a model with sliding layers: the prompt's pass into the empty cache as any model's (the press's
    hooks on the layers it compresses), each sliding layer's slot positions recorded; tokens appended later attend
    through masks the engine builds from those positions (``engine.layered_cache``)."""
    from kvcache_bench.engine.slot_positions import KeptPositions

    if any(cache.stored_slots(layer) for layer in range(len(cache.layers))):
        if press is not None:
            raise ValueError("a press compresses a prompt's first pass only, into an empty cache")
        ids = _on_device([token_ids], model.device)
        return run_appended(model, cache, ids, start_position, logits_to_keep=1).logits[:, -1]
    if start_position:
        raise ValueError("the first pass into an empty cache starts at position 0")
    layer_types = layer_types_of(model)
    traced = tuple(layer for layer in layer_types.pressed_layers if layer_types.is_sliding(layer))
    tracker = KeptPositions(model, traced) if press is not None and traced else None
    with tracker if tracker is not None else contextlib.nullcontext():
        # the model's own masks: an empty cache's slots are its positions
        logits = _prefill_uniform(model, cache, token_ids, press, 0)
    cache.note_prompt_pass(len(token_ids), tracker.positions_by_layer(cache) if tracker is not None else None)
    return logits


def pressed_and_trailing(prompt: PromptTokens, mode: QuestionMode) -> tuple[list[int], list[int]]:
    """(the tokens the press sees, the tokens run after it on the compressed cache) of one example in ``mode``.

    Question-aware, the press sees context + question but the held-back tail (the chat template's
    generation suffix and any answer prefix, at least the prompt's last token); question-agnostic, it
    sees the context.
    """
    match QuestionMode(mode):
        case QuestionMode.QUESTION_AWARE:
            prompt_ids = prompt.context_ids + prompt.question_ids
            held_back = max(1, prompt.held_back_tokens)
            return prompt_ids[:-held_back], prompt_ids[-held_back:]
        case QuestionMode.QUESTION_AGNOSTIC:
            return prompt.context_ids, prompt.question_ids
    raise ValueError(f"no single-example prefill for question mode {mode!r}")


@torch.inference_mode()
def prefill_example(
    model, prompt: PromptTokens, press, mode: QuestionMode, make_cache=default_cache, *, run_held_back: bool = True
):
    """One example's prefill, compressing with ``press``.

    ``run_held_back=False`` stops after the pass under the press (its logits come back, and the tokens
    it did not see are the prompt's tokens after ``pressed tokens``): batched decoding runs them for a
    whole decode batch at once.

    What the press did not see (``pressed_and_trailing``) runs afterwards on the compressed cache, at its
    original positions, as kvpress's pipeline runs the template's suffix after compressing. Holding back
    matters twice: a press must not evict the assistant header the model answers from, and the logits of
    a pass under the press come from full attention, so a first answer token taken from them would answer
    from the uncompressed prompt.
    """
    cache = make_cache()
    pressed_ids, trailing_ids = pressed_and_trailing(prompt, mode)
    last_logits = prefill(model, cache, pressed_ids, press)
    kept, kept_by_type = kept_after_compression(cache)
    if trailing_ids and run_held_back:
        last_logits = prefill(model, cache, trailing_ids, None, start_position=len(pressed_ids))
    return Prefill(cache, last_logits, kept, len(pressed_ids), kept_by_layer_type=kept_by_type)


@torch.inference_mode()
def prefill_shared_context(model, context_ids: list[int], questions: list[list[int]], press, make_cache=default_cache):
    """Question-agnostic prefill: compress ``context_ids`` once, then, question by question, yield its ``Prefill``
    with that question appended at its original positions.

    Before the next question the cache is rolled back to the compressed context, so every question sees
    exactly what compressing the context for it alone would give: use (or copy) the cache before asking
    for the next. ``seconds``: an equal share of the compression plus this question's own prefill.
    """
    start = time.perf_counter()
    cache = make_cache()
    context_logits = prefill(model, cache, context_ids, press)
    kept, kept_by_type = kept_after_compression(cache)
    checkpoint = CacheCheckpoint(cache)
    synchronize(model.device)
    compress_seconds = (time.perf_counter() - start) / max(1, len(questions))
    for index, question_ids in enumerate(questions):
        started = time.perf_counter()
        if index:
            checkpoint.restore(cache)
        last_logits = (
            prefill(model, cache, question_ids, None, start_position=len(context_ids))
            if question_ids
            else context_logits
        )
        synchronize(model.device)
        seconds = compress_seconds + time.perf_counter() - started
        yield Prefill(cache, last_logits, kept, len(context_ids), seconds, kept_by_layer_type=kept_by_type)
