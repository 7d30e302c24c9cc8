"""The multi-turn tables: each cell's score at each turn of a conversation beside the full cache's, and the drop from
turn 1 to the later turns, paired within conversations.

In the ``multi_turn`` question mode (issue 52) a context's K questions are asked one after another on one cache: turn
1 is prefilled and compressed with the first question, as question-aware is, and each later turn appends the previous
answer and the next question. A press chooses what to keep for turn 1's question, so the question a reader asks is
whether the later turns lose what turn 1 did not need. Each scored example is one turn; its record carries ``turn``
(1-based), ``turns`` (K) and ``conversation_id`` (its context), which ``aggregate.per_example_frame`` keeps.

The cell's own row in summary.csv (every turn together) stays one row per cell, as for the other modes; the rows
here are per turn and per cell, in their own tables (results/tables/multi_turn_by_turn.csv and multi_turn_drop.csv)
and in summary.md's "Multi-turn" sections. Intervals are seeded as the summary's are (``aggregate.rng_for``), each
named after its turn, so a turn's interval does not move when turns or cells are added.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from kvcache_bench.analysis.aggregate import (
    BASELINE_BATCH_SIZE,
    CELL_COLUMNS,
    GROUP_COLUMNS,
    N_RESAMPLES,
    _round,
    baseline_scores,
    bootstrap_mean_ci,
    is_baseline,
    paired_difference,
    rng_for,
)
from kvcache_bench.analysis.versus import MULTI_TURN_MODE
from kvcache_bench.methods.registry import METHODS
from kvcache_bench.study.cells import Cell

# Why a multi-turn cell has no example: a conversation needs a second question on the same context.
NO_CONVERSATION_REASON = (
    "multi_turn asks a context's questions one after another, and needs contexts with two or more questions; "
    "this task's contexts have one question each, so it has no conversation to run"
)
BY_TURN_COLUMNS = CELL_COLUMNS + [
    "label",
    "metric",
    "turn",
    "n",
    "score",
    "ci_low",
    "ci_high",
    "n_paired",
    "full_cache_score",
    "diff_vs_full",
    "diff_ci_low",
    "diff_ci_high",
]
DROP_COLUMNS = CELL_COLUMNS + [
    "label",
    "metric",
    "n_conversations",
    "turn_one_score",
    "later_turns_score",
    "drop",
    "drop_ci_low",
    "drop_ci_high",
]


class MultiTurnTables(NamedTuple):
    """What the aggregate job makes of the multi-turn cells: one row per cell and turn, and one per cell of the drop
    from turn 1 to the later turns. Both empty when the study ran no multi-turn cell."""

    by_turn: pd.DataFrame  # BY_TURN_COLUMNS
    drop: pd.DataFrame  # DROP_COLUMNS

    @property
    def empty(self) -> bool:
        return self.by_turn.empty


class CellsWithExamples(NamedTuple):
    """The aggregate job's cells split: those with examples to tabulate (score files, cells and expected n in step),
    and the multi-turn cells without one, as not-run entries ({"target", "problems"}) for the tables."""

    score_files: list[str]
    cells: list[dict]
    expected_n: list
    not_run: list[dict]


def set_aside_multi_turn_without_examples(score_files, cells, expected_n, records_per_file) -> CellsWithExamples:
    """A multi-turn cell with no example (contexts of one question each) is listed under "Not run" with why, never
    tabulated as an n = 0 row: no conversation ran, so there is nothing to score and no turn to draw.
    ``records_per_file``: the number of scored examples in each score file."""
    kept = CellsWithExamples([], [], [], [])
    for score_file, cell, expected, records in zip(score_files, cells, expected_n, records_per_file):
        if cell["question_mode"] == MULTI_TURN_MODE and records == 0:
            kept.not_run.append({"target": Cell(**cell).target, "problems": [NO_CONVERSATION_REASON]})
            continue
        kept.score_files.append(score_file)
        kept.cells.append(cell)
        kept.expected_n.append(expected)
    return kept


def _multi_turn_rows(per_example: pd.DataFrame) -> pd.DataFrame:
    rows = per_example[per_example["question_mode"] == MULTI_TURN_MODE]
    if rows.empty:
        return rows
    missing = rows[rows["turn"].isna()] if "turn" in rows else rows
    if not missing.empty:  # a multi-turn example without its turn cannot be placed in any row of these tables
        raise ValueError(
            f"{len(missing)} multi_turn example(s) have no turn (first: {missing['id'].iloc[0]!r}): their predictions "
            "were not written by the multi_turn engine"
        )
    return rows.astype({"turn": int})


def _cells_in_order(rows: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """Each cell's rows, as the summary orders cells: full cache first, then the registry's order, most kept first."""
    order = {name: position for position, name in enumerate(METHODS)}
    cells = [(dict(zip(CELL_COLUMNS, key)), group) for key, group in rows.groupby(CELL_COLUMNS, sort=False)]
    return sorted(
        cells,
        key=lambda item: (
            *(item[0][c] for c in GROUP_COLUMNS),
            order.get(item[0]["method"], len(order)),
            item[0]["method"],
            -float(item[0]["retention"]),
            int(item[0]["batch_size"]),
            int(item[0]["decode_batch_size"]),
        ),
    )


def _label_of(group: pd.DataFrame) -> str:
    return group["label"].iloc[0] if "label" in group else group["method"].iloc[0]


def score_by_turn(per_example: pd.DataFrame, seed: int = 0, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """One row per multi-turn cell and turn: n, the mean score x100 with its 95% bootstrap interval, and, on the
    examples both scored at that turn, the full cache's score and the paired difference to it with its paired
    interval (the full cache it is compared with is the summary's: ``aggregate.baseline_scores``)."""
    rows = _multi_turn_rows(per_example)
    if rows.empty:
        return pd.DataFrame(columns=BY_TURN_COLUMNS)
    cells = _cells_in_order(rows)
    # full cache by group, decode batch and turn: {id: score}
    baselines: dict[tuple, dict[int, dict[int, dict[str, float]]]] = {}
    for cell, group in cells:
        if is_baseline(cell):
            by_turn = {int(t): dict(zip(g["id"], g["score"])) for t, g in group.groupby("turn")}
            baselines.setdefault(tuple(cell[c] for c in GROUP_COLUMNS), {})[int(cell["decode_batch_size"])] = by_turn
    table = []
    for cell, group in cells:
        by_decode_batch = baselines.get(tuple(cell[c] for c in GROUP_COLUMNS), {})
        for turn, at_turn in group.groupby("turn", sort=True):
            scores = dict(zip(at_turn["id"], at_turn["score"].astype(float)))
            if len(scores) != len(at_turn):
                raise ValueError(f"{'/'.join(map(str, cell.values()))}: an example scored twice at turn {turn}")
            values = list(scores.values())
            low, high = bootstrap_mean_ci(values, rng_for(seed, cell, f"turn-{turn}"), n_resamples)
            row = {
                **cell,
                "label": _label_of(group),
                "metric": group["metric"].iloc[0],
                "turn": int(turn),
                "n": len(values),
                "score": _round(100 * float(np.mean(values))),
                "ci_low": _round(100 * low),
                "ci_high": _round(100 * high),
            }
            at_turn_baselines = {decode: turns.get(int(turn), {}) for decode, turns in by_decode_batch.items()}
            baseline = baseline_scores(cell, at_turn_baselines)
            if baseline is not None:
                row.update(paired_difference(scores, baseline, rng_for(seed, cell, f"paired-turn-{turn}"), n_resamples))
            table.append(row)
    return pd.DataFrame(table, columns=BY_TURN_COLUMNS)


def _mean_x100(values) -> float:
    return _round(100 * float(np.mean(values))) if len(values) else math.nan


def turn_one_drop(per_example: pd.DataFrame, seed: int = 0, n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """One row per multi-turn cell: per conversation, turn 1's score minus the mean of its later turns' scores, and
    the mean of that over conversations x100 with its 95% bootstrap interval (resampling conversations: the pairing
    cancels how hard each context is). Positive: the score fell after turn 1. A conversation without turn 1 or
    without a later turn scored has no drop and is left out (``n_conversations`` counts those that have one)."""
    rows = _multi_turn_rows(per_example)
    if rows.empty:
        return pd.DataFrame(columns=DROP_COLUMNS)
    table = []
    for cell, group in _cells_in_order(rows):
        first, later = [], []
        for conversation, turns in group.groupby("conversation_id", sort=True):
            opening = turns[turns["turn"] == 1]["score"]
            rest = turns[turns["turn"] > 1]["score"]
            if len(opening) > 1:
                raise ValueError(f"{'/'.join(map(str, cell.values()))}: conversation {conversation!r} has two turn 1s")
            if len(opening) == 1 and len(rest):
                first.append(float(opening.iloc[0]))
                later.append(float(rest.mean()))
        drops = np.array(first) - np.array(later)
        low, high = bootstrap_mean_ci(drops, rng_for(seed, cell, "turn-one-drop"), n_resamples)
        table.append(
            {
                **cell,
                "label": _label_of(group),
                "metric": group["metric"].iloc[0],
                "n_conversations": len(drops),
                "turn_one_score": _mean_x100(first),
                "later_turns_score": _mean_x100(later),
                "drop": _mean_x100(drops),
                "drop_ci_low": _round(100 * low),
                "drop_ci_high": _round(100 * high),
            }
        )
    return pd.DataFrame(table, columns=DROP_COLUMNS)


def multi_turn_tables(per_example: pd.DataFrame, seed: int = 0, n_resamples: int = N_RESAMPLES) -> MultiTurnTables:
    return MultiTurnTables(score_by_turn(per_example, seed, n_resamples), turn_one_drop(per_example, seed, n_resamples))


def figure_rows(by_turn: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The per-turn rows a figure draws: as the other figures, batch 1 at the smallest decode batch, and no cell the
    summary flags incomplete (scored on fewer examples than asked: its turns would not be the same conversations)."""
    rows = by_turn[by_turn["batch_size"] == BASELINE_BATCH_SIZE]
    if rows.empty:
        return rows
    rows = rows[rows["decode_batch_size"] == rows["decode_batch_size"].min()]
    incomplete = summary[summary["incomplete"].astype(bool)][CELL_COLUMNS].drop_duplicates()
    if incomplete.empty:
        return rows
    marked = rows.merge(incomplete.assign(_incomplete=True), on=CELL_COLUMNS, how="left")
    return marked[marked["_incomplete"].isna()].drop(columns="_incomplete").reset_index(drop=True)
