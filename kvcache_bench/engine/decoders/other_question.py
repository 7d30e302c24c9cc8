"""Context + another question on it compressed once, that question's slots removed, each question decoded from the
rest (other_question; same_question with the prompt's own): what a cache reused for another question keeps."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from kvcache_bench.engine.caches import default_cache, has_key_masks
from kvcache_bench.engine.decoders import Decoding, in_prompt_order, shared_context_groups
from kvcache_bench.engine.greedy import DecodePath, Generation
from kvcache_bench.engine.layer_types import layer_types_of
from kvcache_bench.engine.layered_cache import is_layered
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import kept_after_compression, prefill
from kvcache_bench.engine.prefilled import PrefilledPrompt
from kvcache_bench.engine.slot_positions import KeptPositions, context_slots
from kvcache_bench.engine.static_decode import decode_together_timed
from kvcache_bench.study.prompt_tokens import PromptTokens


@dataclass
class ContextWithoutQuestion:
    """A context compressed with another question in view, that question's slots removed."""

    keys: list[torch.Tensor]  # per layer [1, kv_heads, width_l, head_dim]; each head's slots right-aligned
    values: list[torch.Tensor]
    head_lengths: list[list[int]]  # per layer, per KV head: its real (context) slots
    context_positions: list[list[list[int]]]  # per layer, per KV head: the context positions those slots hold
    last_logits: torch.Tensor  # the pass under the press's: replaced by the question's before any token is chosen
    context_tokens: int
    pressed_tokens: int  # context + the other question's pressed tokens
    kept_tokens: float  # mean over layers of slots right after compression, the other question's included
    kept_context_slots: float  # mean over layers and KV heads of context slots left after the removal
    seconds: float
    # a model with sliding layers: per layer, [kv_heads, width] positions of the slots (right-aligned like the keys)
    # for each sliding layer, None for a global one; and the window
    slot_positions: list[torch.Tensor | None] | None = None
    window: int | None = None
    kept_by_layer_type: dict[str, float] | None = None


@torch.inference_mode()
def compress_with_other_question(
    model, context_ids: list[int], other_question_ids: list[int], press, make_cache=default_cache
) -> ContextWithoutQuestion:
    """Compress ``context_ids + other_question_ids`` under ``press``, then drop every slot of the other question."""
    from transformers import DynamicCache

    start = time.perf_counter()
    cache = make_cache()
    layered = is_layered(cache)
    pressed_tokens = len(context_ids) + len(other_question_ids)
    # a sliding layer kept whole holds its window's last positions, known without tracing (its keys before and after
    # the pass are the same window, which cannot tell absolute positions)
    traced = layer_types_of(model).pressed_layers if layered else None
    with KeptPositions(model, traced) as tracker:
        last_logits = prefill(model, cache, context_ids + other_question_ids, press)
    if type(cache) is not DynamicCache and not layered:
        raise ValueError(f"the other-question mode removes slots from a DynamicCache, not a {type(cache).__name__}")
    if has_key_masks(model):
        raise ValueError("the other-question mode cannot remove slots of a press that masks keys per head")
    kept, kept_by_type = kept_after_compression(cache)
    by_layer = tracker.positions_by_layer(cache)
    positions = [
        by_layer[layer] if layer in by_layer else cache.slot_positions[layer] for layer in range(len(cache.layers))
    ]
    keys, values, head_lengths, context_positions = [], [], [], []
    slot_positions: list[torch.Tensor | None] = []
    for layer, layer_positions in zip(cache.layers, positions):
        is_context = layer_positions < len(context_ids)  # [kv_heads, kept]
        lengths = is_context.sum(-1).tolist()
        width = max(lengths)
        layer_keys = layer.keys.new_zeros(1, layer.keys.shape[1], width, layer.keys.shape[-1])
        layer_values = layer.values.new_zeros(1, layer.values.shape[1], width, layer.values.shape[-1])
        held_positions = torch.full((len(lengths), width), -(2**40), dtype=torch.long, device=layer.keys.device)
        for head, length in enumerate(lengths):
            slots = is_context[head].nonzero().view(-1)
            layer_keys[0, head, width - length :] = layer.keys[0, head, slots]
            layer_values[0, head, width - length :] = layer.values[0, head, slots]
            held_positions[head, width - length :] = layer_positions[head, slots]
        slot_positions.append(held_positions if layered and cache.layer_types.is_sliding(len(keys)) else None)
        keys.append(layer_keys)
        values.append(layer_values)
        head_lengths.append(lengths)
        context_positions.append([layer_positions[head, is_context[head]].tolist() for head in range(len(lengths))])
    synchronize(model.device)
    return ContextWithoutQuestion(
        keys,
        values,
        head_lengths,
        context_positions,
        last_logits,
        len(context_ids),
        pressed_tokens,
        kept,
        # over the layers a press compresses, as ``kept`` (a window kept whole is no press's doing)
        context_slots([positions[layer] for layer in layer_types_of(model).pressed_layers], len(context_ids)),
        time.perf_counter() - start,
        slot_positions if layered else None,
        cache.layer_types.window if layered else None,
        kept_by_type,
    )


def prefilled_question(
    compressed: ContextWithoutQuestion, question_ids: list[int], share_of_compression: float
) -> PrefilledPrompt:
    """This question on the compressed context, to be run by ``decode_together`` at the context's end."""
    if not question_ids:
        raise ValueError("the other-question mode needs this example's question tokens: they are what it asks")
    return PrefilledPrompt(
        compressed.keys,
        compressed.values,
        compressed.last_logits,
        compressed.context_tokens + len(question_ids),
        compressed.kept_tokens,
        compressed.pressed_tokens,
        share_of_compression,
        list(question_ids),
        held_back_start=compressed.context_tokens,
        head_lengths=compressed.head_lengths,
        slot_positions=compressed.slot_positions,
        window=compressed.window,
        kept_by_layer_type=compressed.kept_by_layer_type,
    )


@dataclass(frozen=True)
class OtherQuestionGroup:
    """Questions answered from one compression: one context, one other question in view."""

    context_ids: list[int]
    other_question_ids: list[int]  # the other question's tokens the press sees
    questions: list[list[int]]  # each example's question (all of its tokens: none was pressed)


@torch.inference_mode()
def generate_other_question(
    settings: Decoding, groups: list[OtherQuestionGroup]
) -> tuple[list[Generation], DecodePath]:
    """Generations group by group, question by question: each group compressed once,
    ``settings.decode_batch_size`` rows decoded at a time."""
    model, decode_batch_size = settings.model, settings.decode_batch_size
    rows: list[tuple[PrefilledPrompt, ContextWithoutQuestion, int]] = []
    for group in groups:
        compressed = compress_with_other_question(
            model, group.context_ids, group.other_question_ids, settings.press, settings.make_cache
        )
        share = compressed.seconds / len(group.questions)
        rows += [
            (prefilled_question(compressed, question, share), compressed, len(group.questions))
            for question in group.questions
        ]
    generations = []
    for start in range(0, len(rows), decode_batch_size):
        batch = rows[start : start + decode_batch_size]
        decoded = decode_together_timed(
            model, [p for p, _, _ in batch], settings.max_new_tokens, settings.stop_ids, settings.min_new_tokens
        )
        decode_share, capture = decoded.shares()
        for (p, compressed, questions), token_ids in zip(batch, decoded.token_ids):
            generations.append(
                Generation(
                    token_ids,
                    p.prompt_tokens,
                    p.kept_tokens,
                    p.seconds + decode_share,
                    p.pressed_tokens,
                    questions,
                    kept_context_slots=compressed.kept_context_slots,
                    graph_capture_seconds=capture,
                    kept_by_layer_type=compressed.kept_by_layer_type,
                )
            )
    largest = min(decode_batch_size, len(rows))
    return generations, DecodePath(decode_batch_size, largest, None)


def decode(
    settings: Decoding, prompts: list[PromptTokens], others: list[list[int]] | None = None
) -> tuple[list[Generation], DecodePath]:
    groups = shared_context_groups(prompts, others)
    generations, path = generate_other_question(
        settings,
        [
            OtherQuestionGroup(prompts[g[0]].context_ids, others[g[0]], [prompts[i].question_ids for i in g])
            for g in groups
        ],
    )
    return in_prompt_order(groups, generations), path
