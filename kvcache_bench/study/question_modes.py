"""The question modes: which question, if any, the press sees while it compresses an example's context.

A mode is a value that travels from the cell (its path's ``question_mode`` wildcard) down to the prefill,
so that a new mode is one more member here and one more branch where the prefill builds what the press sees.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from enum import StrEnum


class QuestionMode(StrEnum):
    """Compares equal to its value, the wildcard string (``QuestionMode.QUESTION_AWARE == "question_aware"``)."""

    # the press sees context + this example's question (but the held-back tail: the chat template's suffix)
    QUESTION_AWARE = "question_aware"
    # the press sees the context alone; the question runs afterwards on the compressed cache
    QUESTION_AGNOSTIC = "question_agnostic"
    # the press sees context + another question on the same context; that question's slots are then removed
    # and this example's question runs where it would in question_agnostic (engine.decoders.other_question)
    OTHER_QUESTION = "other_question"
    # as other_question, with this example's own question in view: its slots removed, it runs again uncompressed.
    # other_question differs from it only in which question the press saw (question_aware also presses the
    # question's own tokens, so a press can evict the question itself)
    SAME_QUESTION = "same_question"
    # a conversation on one context (SCBench): turn 1 is question_aware on its first question; each later turn
    # appends the previous turn's reference answer and the next question, uncompressed, to the same cache
    # (engine.decoders.multi_turn). Contexts with one question cannot be in it.
    MULTI_TURN = "multi_turn"

    @property
    def removes_the_question_it_showed(self) -> bool:
        """The press saw a question whose slots are then removed (engine.decoders.other_question)."""
        return self in (QuestionMode.OTHER_QUESTION, QuestionMode.SAME_QUESTION)


QUESTION_MODES = tuple(mode.value for mode in QuestionMode)


def questions_by_context(rows: list[dict]) -> list[list[dict]]:
    """Rows grouped by identical context text, in order of first appearance (Qasper asks several per paper)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["context"], []).append(row)
    return list(groups.values())


def contexts_with_several_questions(rows: list[dict]) -> tuple[int, int]:
    """(contexts with two or more questions, contexts): how much of a dataset the other-question mode can use."""
    groups = questions_by_context(rows)
    return sum(len(group) >= 2 for group in groups), len(groups)


def other_questions(rows: list[dict], seed: int) -> dict[str, str | None]:
    """For each row id, the id of the other question on its context the press sees in ``other_question`` mode.

    Chosen from the seed and the row's own id alone, so a row gets the same other question whichever rows
    share its file; None where the context has no other question (the row cannot be in this mode).
    """
    chosen: dict[str, str | None] = {}
    for group in questions_by_context(rows):
        ids = [row["_id"] for row in group]
        for row_id in ids:
            others = sorted(other for other in ids if other != row_id)
            chosen[row_id] = random.Random(f"{seed}/{row_id}").choice(others) if others else None
    return chosen


# What a later turn appends after the previous turn's answer (config ``multi_turn.history``): the reference answer
# (SCBench's default, so turns are independent of each other's errors) or the model's own.
HISTORY_REFERENCE, HISTORY_GENERATED = "reference", "generated"
MULTI_TURN_HISTORIES = (HISTORY_REFERENCE, HISTORY_GENERATED)

# The fields a multi_turn prediction record adds (engine.cell_runner.multi_turn_record), for the tables that read them:
# turn (1-based), turns (K), conversation_id, multi_turn_history, cache_tokens_before_turn (turn 1's kept slots plus
# the tokens earlier turns appended), context_tokens_kept, kv_bytes_held and kv_bytes_uncompressed (the cache the turn
# answers from, and the full cache's then), appended_turns_compressed (true only for a press that compresses while
# decoding: it is active over the appended turns; then cache_tokens_before_turn and context_tokens_kept are None).
MULTI_TURN_RECORD_FIELDS = (
    "turn",
    "turns",
    "conversation_id",
    "multi_turn_history",
    "cache_tokens_before_turn",
    "context_tokens_kept",
    "kv_bytes_held",
    "kv_bytes_uncompressed",
    "appended_turns_compressed",
)


def context_hash(context: str) -> str:
    """A short stable id of a context's text: the conversation id of its questions in ``multi_turn`` mode."""
    return hashlib.sha256(context.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Conversation:
    """One context's questions in the order its ``multi_turn`` conversation asks them (``rows[t - 1]`` is turn t)."""

    conversation_id: str  # ``context_hash`` of the shared context
    rows: tuple[dict, ...]

    @property
    def turns(self) -> int:
        return len(self.rows)


def conversations(rows: list[dict], seed: int) -> list[Conversation]:
    """The ``multi_turn`` conversations of ``rows``: one per context with two or more questions, in order of the
    context's first appearance, its questions shuffled by the seed and the context alone.

    The order is drawn over the rows sorted by id, so it does not depend on the file's row order (or on which other
    contexts share the file); a context with one question has no conversation."""
    found = []
    for group in questions_by_context(rows):
        if len(group) < 2:
            continue
        conversation_id = context_hash(group[0]["context"])
        ordered = sorted(group, key=lambda row: str(row["_id"]))
        random.Random(f"{seed}/{conversation_id}").shuffle(ordered)
        found.append(Conversation(conversation_id, tuple(ordered)))
    return found


def no_conversation_problem(rows: list[dict], where: str) -> str | None:
    """Why the ``multi_turn`` mode has nothing to run on ``rows`` (of ``where``, a dataset/task), or None: it needs a
    context with two or more questions. Said under "Not run" rather than as a cell of no examples."""
    several, contexts = contexts_with_several_questions(rows)
    if several:
        return None
    return (
        f"multi_turn asks one context's questions as a conversation, and none of the {contexts} contexts of {where} "
        "has two or more questions. Use a dataset whose contexts share questions (e.g. RULER's niah_multikey_1 "
        "haystacks with questions_per_haystack, or LongBench's qasper)."
    )
