"""A conversation on one context (multi_turn): its first turn compressed once, every later turn appended uncompressed.

As SCBench measures it, turn 1 is context + first question compressed as question_aware does; each later turn
appends the previous turn's answer and the next question to the same cache.

A press that compresses only at prefill never touches the appended turns, so turn t's cache is turn 1's compressed
slots followed by every token appended since, uncompressed, at their true positions. With the reference answers as
history no turn depends on another's output: each context is compressed once, and every turn of every context is a
row built from that one snapshot (its appended tokens as held-back ids, run in one forward before its first token),
decoded together through ``static_decode.decode_together`` as the other decode-many strategies are.

With the model's own answers as history (``multi_turn.history: generated``, ``generate_turns_in_order``) turn t is
known only once turn t - 1 is answered: each context is still compressed once, and the turns run in order, turn t of
every conversation decoded together after turn t - 1.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcache_bench.engine.decoders import Decoding
from kvcache_bench.engine.greedy import DecodePath, Generation
from kvcache_bench.engine.layer_types import layer_types_of
from kvcache_bench.engine.loading import synchronize
from kvcache_bench.engine.prefill import prefill_example
from kvcache_bench.engine.prefilled import PrefilledPrompt, prefilled_from_cache
from kvcache_bench.engine.slot_positions import KeptPositions, context_slots
from kvcache_bench.engine.static_decode import decode_together_timed
from kvcache_bench.study.prompt_tokens import PromptTokens
from kvcache_bench.study.question_modes import QuestionMode


@dataclass(frozen=True)
class ConversationTurn:
    """One turn of a conversation as the engine runs it: its conversation's first prompt and what follows it."""

    first_turn: PromptTokens  # context + the first question: the only tokens a press sees
    # every id after the first turn's prompt up to this turn's generation prompt: for turn t, turns 2..t's appended
    # ids (study.prompt_tokens.appended_turn_ids) concatenated; [] for turn 1
    appended_ids: list[int]

    @property
    def prompt_tokens(self) -> int:
        """The whole conversation up to this turn's answer: where its generated tokens' positions start."""
        return self.first_turn.length + len(self.appended_ids)


@dataclass
class CompressedFirstTurn:
    """A conversation's first turn prefilled under the press, its held-back tail not yet run: every turn's start."""

    snapshot: PrefilledPrompt  # held_back_ids: the first prompt's tail no press sees (the chat template's suffix)
    kept_context_slots: float  # mean over pressed layers and KV heads of slots holding a context position
    seconds: float


@torch.inference_mode()
def compress_first_turn(settings: Decoding, first_turn: PromptTokens) -> CompressedFirstTurn:
    """Prefill context + first question under the press as question_aware does, and snapshot the compressed cache.

    The slots a press kept are traced to their positions (``KeptPositions``) only to count the context's among them;
    the question's kept slots stay in the cache, as they would in a conversation. A masking press's masks (AdaKV,
    KVzip) go with the snapshot, off the model: every turn's row hides the same slots, as kvpress's fake keys hide them
    from every later query at batch 1."""
    model, press = settings.model, settings.press
    started = time.perf_counter()
    pressed_layers = layer_types_of(model).pressed_layers
    tracker = KeptPositions(model, pressed_layers) if press is not None else None  # the full cache keeps them all
    with tracker if tracker is not None else contextlib.nullcontext():
        done = prefill_example(
            model, first_turn, press, QuestionMode.QUESTION_AWARE, settings.make_cache, run_held_back=False
        )
    prompt_ids = first_turn.context_ids + first_turn.question_ids
    held_back = prompt_ids[done.pressed_tokens :]
    # the snapshot's keys are only read: every turn's row shares them
    snapshot = prefilled_from_cache(model, done, first_turn.length, copy=False, held_back_ids=held_back, key_masks=True)
    if tracker is None:
        context_kept = float(len(first_turn.context_ids))
    else:
        by_layer = tracker.positions_by_layer(done.cache)
        # a slot a masking press hid is held, not kept: no query reads it
        visible = [
            torch.where(snapshot.key_masks[layer], len(first_turn.context_ids), by_layer[layer])
            if snapshot.key_masks is not None and snapshot.key_masks[layer] is not None
            else by_layer[layer]
            for layer in pressed_layers
        ]
        context_kept = context_slots(visible, len(first_turn.context_ids))
    synchronize(model.device)
    return CompressedFirstTurn(snapshot, context_kept, time.perf_counter() - started)


def turn_row(compressed: CompressedFirstTurn, turn: ConversationTurn, share_of_compression: float) -> PrefilledPrompt:
    """This turn on its conversation's compressed first turn: the first prompt's tail and every appended id run
    uncompressed at their true positions (right after the pressed tokens), then the answer is generated."""
    first = compressed.snapshot
    return PrefilledPrompt(
        first.keys,
        first.values,
        first.last_logits,
        turn.prompt_tokens,
        first.kept_tokens,
        first.pressed_tokens,
        share_of_compression,
        first.held_back_ids + turn.appended_ids,
        key_masks=first.key_masks,
        slot_positions=first.slot_positions,
        window=first.window,
        kept_by_layer_type=first.kept_by_layer_type,
    )


def as_question_aware(turn: ConversationTurn) -> PromptTokens:
    """This turn as one question_aware prompt whose held-back tail is the first prompt's tail and every appended id:
    a press sees the same tokens, and the rest runs after them at the same positions. A press that compresses while
    decoding runs each turn so (``decoders.press_while_decoding``): active over the appended turns and the answer."""
    first = turn.first_turn
    return PromptTokens(
        first.context_ids,
        first.question_ids + turn.appended_ids,
        held_back_tokens=max(1, first.held_back_tokens) + len(turn.appended_ids),
        truncated=first.truncated,
        original_tokens=first.original_tokens,
        chat_template=first.chat_template,
        truncated_by=first.truncated_by,
    )


def conversation_groups(turns: list[ConversationTurn]) -> list[list[int]]:
    """Indices of turns on the same first prompt (one conversation), in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, turn in enumerate(turns):
        groups.setdefault(tuple(turn.first_turn.context_ids + turn.first_turn.question_ids), []).append(index)
    return list(groups.values())


@torch.inference_mode()
def generate_multi_turn(settings: Decoding, turns: list[ConversationTurn]) -> tuple[list[Generation], DecodePath]:
    """Generations for ``turns`` in their order: each conversation's first turn compressed once (its time shared
    equally among its turns), then ``settings.decode_batch_size`` turns, of any conversations, decoded at a time."""
    model, decode_batch_size = settings.model, settings.decode_batch_size
    rows: list[tuple[int, PrefilledPrompt, CompressedFirstTurn, int]] = []
    for group in conversation_groups(turns):
        compressed = compress_first_turn(settings, turns[group[0]].first_turn)
        share = compressed.seconds / len(group)
        rows += [(index, turn_row(compressed, turns[index], share), compressed, len(group)) for index in group]
    generations: list[Generation | None] = [None] * len(turns)
    for start in range(0, len(rows), decode_batch_size):
        batch = rows[start : start + decode_batch_size]
        decoded = decode_together_timed(
            model, [row for _, row, _, _ in batch], settings.max_new_tokens, settings.stop_ids, settings.min_new_tokens
        )
        decode_share, capture = decoded.shares()
        for (index, row, compressed, group_turns), token_ids in zip(batch, decoded.token_ids):
            generations[index] = Generation(
                token_ids,
                row.prompt_tokens,
                row.kept_tokens,
                row.seconds + decode_share,
                row.pressed_tokens,
                group_turns,
                kept_context_slots=compressed.kept_context_slots,
                graph_capture_seconds=capture,
                kept_by_layer_type=row.kept_by_layer_type,
            )
    return generations, DecodePath(decode_batch_size, min(decode_batch_size, len(rows)), None)


@dataclass(frozen=True)
class ConversationInOrder:
    """A conversation whose later turns append the model's own answers: turn t is known after turn t - 1 only."""

    first_turn: PromptTokens
    turns: int
    # the ids turn t (>= 2) appends after turn t - 1's prompt, from the generated ids of turns 1..t-1 (the cell runner
    # decodes them and builds the turn in the model's prompt form: study.prompt_tokens.appended_turn_ids)
    appended_for: Callable[[int, list[list[int]]], list[int]]


@torch.inference_mode()
def generate_turns_in_order(
    settings: Decoding, conversations: list[ConversationInOrder]
) -> tuple[list[list[Generation]], list[list[ConversationTurn]], DecodePath]:
    """(each conversation's generations in turn order, the turns they answered, the decode path): each first turn
    compressed once, then turn 1 of every conversation decoded together, then turn 2 on those answers, and so on,
    ``settings.decode_batch_size`` rows at a time. A conversation's compression is shared equally among its turns."""
    model, decode_batch_size = settings.model, settings.decode_batch_size
    compressed = [compress_first_turn(settings, conversation.first_turn) for conversation in conversations]
    appended: list[list[int]] = [[] for _ in conversations]
    generations: list[list[Generation]] = [[] for _ in conversations]
    asked: list[list[ConversationTurn]] = [[] for _ in conversations]
    largest = 0
    for turn in range(1, max(conversation.turns for conversation in conversations) + 1):
        rows: list[tuple[int, PrefilledPrompt]] = []
        for index, conversation in enumerate(conversations):
            if conversation.turns < turn:
                continue
            if turn > 1:
                answers = [generation.token_ids for generation in generations[index]]
                appended[index] = appended[index] + conversation.appended_for(turn, answers)
            asked[index].append(ConversationTurn(conversation.first_turn, list(appended[index])))
            share = compressed[index].seconds / conversation.turns
            rows.append((index, turn_row(compressed[index], asked[index][-1], share)))
        for start in range(0, len(rows), decode_batch_size):
            batch = rows[start : start + decode_batch_size]
            decoded = decode_together_timed(
                model, [row for _, row in batch], settings.max_new_tokens, settings.stop_ids, settings.min_new_tokens
            )
            decode_share, capture = decoded.shares()
            for (index, row), token_ids in zip(batch, decoded.token_ids):
                generations[index].append(
                    Generation(
                        token_ids,
                        row.prompt_tokens,
                        row.kept_tokens,
                        row.seconds + decode_share,
                        row.pressed_tokens,
                        conversations[index].turns,
                        kept_context_slots=compressed[index].kept_context_slots,
                        graph_capture_seconds=capture,
                        kept_by_layer_type=row.kept_by_layer_type,
                    )
                )
            largest = max(largest, len(batch))
    return generations, asked, DecodePath(decode_batch_size, largest, None)


def decode(
    settings: Decoding, prompts: list[PromptTokens], appended: list[list[int]] | None = None
) -> tuple[list[Generation], DecodePath]:
    """``prompts``: each turn's conversation's first prompt; ``appended``: each turn's ids after it."""
    if appended is None:
        raise ValueError("the multi_turn mode needs each turn's appended ids")
    return generate_multi_turn(settings, [ConversationTurn(p, list(a)) for p, a in zip(prompts, appended)])
