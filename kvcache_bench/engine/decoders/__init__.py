"""How a cell's examples are prefilled and decoded: one file per strategy, as kvpress has one file per press.

``choose_strategy`` (engine.cell_runner) fixes a cell's ``Strategy``; ``DECODERS[strategy]`` generates each chunk of
its prompts. Every decoder takes the cell's ``Decoding`` settings (``engine.greedy``: the model, its press and cache,
the stops), the chunk's prompts and, in the other-question mode, each prompt's other question (in the multi_turn mode,
each turn's ids appended after its conversation's first prompt), and returns the generations in the prompts' order
with the decode path that made them. Each file's ``generate_*`` takes the same ``Decoding`` first, so tests and the
probes call a strategy as the cell runner does.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from kvcache_bench.engine.greedy import DecodePath, Decoding, Generation
from kvcache_bench.study.prompt_tokens import PromptTokens


class Strategy(Enum):
    """How a cell's examples are prefilled and decoded; fixed per cell by ``choose_strategy``."""

    ONE_BY_ONE = "one_by_one"  # each example prefilled, compressed and decoded alone
    SHARED_CONTEXT = "shared_context"  # a context compressed once, each of its questions decoded alone from it
    PADDED_BATCH = "padded_batch"  # left-padded prompts prefilled and decoded together (methods that keep every token)
    DECODE_MANY = "decode_many"  # each example prefilled alone, their compressed caches decoded together
    SHARED_CONTEXTS_TOGETHER = (
        "shared_contexts_together"  # contexts compressed once, all their questions decoded together
    )
    OTHER_QUESTION = (
        "other_question"  # context + a question compressed once, its slots removed, questions decoded
        # (other_question, same_question)
    )
    # a conversation's first turn compressed once, every later turn appended uncompressed, turns decoded together
    MULTI_TURN = "multi_turn"
    PRESS_WHILE_DECODING = "press_while_decoding"  # each example alone, the press active over its question and decoding


Decoder = Callable[[Decoding, list[PromptTokens], "list[list[int]] | None"], tuple[list[Generation], DecodePath]]


def at_batch_one(settings: Decoding, fallback: str | None = None) -> DecodePath:
    """The path of a chunk decoded one example at a time (``fallback``: why, when the cell asked for more)."""
    return DecodePath(settings.decode_batch_size, 1, fallback if settings.decode_batch_size > 1 else None)


def shared_context_groups(prompts: list[PromptTokens], others: list[list[int]] | None = None) -> list[list[int]]:
    """Indices of prompts whose press input is identical (their context, and in the other-question mode the
    other question's tokens ``others``), in order of first appearance: each group is compressed once."""
    groups: dict[tuple, list[int]] = {}
    for index, prompt in enumerate(prompts):
        other = tuple(others[index]) if others is not None else ()
        groups.setdefault((tuple(prompt.context_ids), other), []).append(index)
    return list(groups.values())


def in_prompt_order(groups: list[list[int]], generations: list[Generation]) -> list[Generation]:
    """Generations made group by group, back in the prompts' order."""
    by_index = dict(zip([i for group in groups for i in group], generations))
    return [by_index[i] for i in range(len(by_index))]


from kvcache_bench.engine.decoders import (  # noqa: E402  (each strategy's file needs the names above)
    decode_many,
    multi_turn,
    one_by_one,
    other_question,
    padded_batch,
    press_while_decoding,
    shared_context,
    shared_contexts_together,
)

DECODERS: dict[Strategy, Decoder] = {
    Strategy.ONE_BY_ONE: one_by_one.decode,
    Strategy.SHARED_CONTEXT: shared_context.decode,
    Strategy.PADDED_BATCH: padded_batch.decode,
    Strategy.DECODE_MANY: decode_many.decode,
    Strategy.SHARED_CONTEXTS_TOGETHER: shared_contexts_together.decode,
    Strategy.OTHER_QUESTION: other_question.decode,
    Strategy.MULTI_TURN: multi_turn.decode,
    Strategy.PRESS_WHILE_DECODING: press_while_decoding.decode,
}
