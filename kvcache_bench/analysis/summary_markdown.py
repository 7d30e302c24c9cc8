"""summary.md, the table people read: warnings, notes, then one table per share of the KV cache kept.

``analysis.aggregate`` computes the summary (one row per cell, with its intervals and paired gaps); this module
writes it for a reader: warnings about small, incomplete and mis-measured cells first, then the notes a reader
should not miss (a score that rises as a method keeps less, question modes far apart; each with its known cause
and the docs that explain it), then per dataset/task/model the full cache's table and one per retention, methods
best first. Kept apart from the computation, which the figures, the ranking, the padding table and the exports
import for its constants and tables; only the aggregate script writes the Markdown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from kvcache_bench.analysis.aggregate import (
    BASELINE_BATCH_SIZE,
    CELL_COLUMNS,
    CONFIDENCE,
    NO_EXAMPLE_REASON,
    SMALL_N,
    _interval,
    retention_percent,
)
from kvcache_bench.analysis.measured import cell_warnings, flagged_cells
from kvcache_bench.analysis.versus import BASELINE_METHOD, labeller, modes_in_order
from kvcache_bench.escaping import markdown_text
from kvcache_bench.methods.registry import FULL_RETENTION, METHODS

if TYPE_CHECKING:
    from kvcache_bench.analysis.multi_turn import MultiTurnTables

# What a note flags, and why it is known to happen (the docs that explain it). A flag without a known
# cause says so: it is for the reader to investigate.
WHY = {
    "rises": (
        "PyramidKV: on a model of few layers its budget formula gives the top layer a sliver of the cache at 50% and "
        "falls back to SnapKV's even budget once its smallest layer budget would be under the window "
        '(docs/canary.md, "PyramidKV keeps more when asked to keep less")'
    ),
    "aware_low": (
        "in question-aware the question's own tokens are pressed with the context, so a press can evict the question "
        'itself; the other modes run it uncompressed (docs/other-question.md, "A negative difference is not a gain '
        'from the other question")'
    ),
    "aware_high": (
        "a press that reads the question keeps what that question needs, and a cache chosen for no question or for "
        'another one does not hold it (docs/other-question.md, "SnapKV and PyramidKV lose most when '
        'the question changes")'
    ),
}
KNOWN_RISES = {"pyramidkv"}
MODES_APART_POINTS = 50.0  # a method's score in two question modes this far apart is flagged in the notes


def _figure_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """What the figures draw: complete batch-1 cells at the smallest decode batch."""
    frame = summary[(summary["batch_size"] == BASELINE_BATCH_SIZE) & ~summary["incomplete"].astype(bool)]
    return frame[frame["decode_batch_size"] == frame["decode_batch_size"].min()] if not frame.empty else frame


def _modes_apart(at: pd.DataFrame) -> str | None:
    """Which way a cell's question modes are more than MODES_APART_POINTS apart, if they are."""
    scores = at.set_index("question_mode")["score"]
    if len(scores) < 2 or scores.max() - scores.min() <= MODES_APART_POINTS:
        return None
    if "question_aware" in scores and scores["question_aware"] == scores.min():
        return "aware_low"
    if "question_aware" in scores and scores["question_aware"] == scores.max():
        return "aware_high"
    return "apart"


def markdown_labeller(summary: pd.DataFrame):
    """``label(method)`` as literal Markdown: a custom label is the user's text, and a '|', a newline or a
    ``<script>`` in it must not end a table's cell or row or reach GitHub's renderer as HTML (docs/hostile-cases.md)."""
    label = labeller(summary)
    return lambda method: markdown_text(label(method))


def summary_notes(summary: pd.DataFrame, label=None) -> list[str]:
    """What a reader should not miss, one line per method and kind: a score that rises as the method keeps less
    (a lower retention's interval wholly above a higher one's), or question modes more than 50 points apart;
    then, once per kind, the known cause and the docs that explain it (or that none is known)."""
    label = label or markdown_labeller(summary)
    frame = _figure_rows(summary)
    frame = frame[(frame["method"] != BASELINE_METHOD) & (frame["retention"] < FULL_RETENTION)]
    notes, kinds = [], []
    for (dataset, task, model, method), cells in frame.groupby(["dataset", "task", "model", "method"], sort=True):
        where = f"{dataset}/{task}/{model}"
        rising = []
        for mode in modes_in_order(cells["question_mode"]):
            line = cells[cells["question_mode"] == mode].sort_values("retention", ascending=False)
            if any(
                less.retention < more.retention and less.ci_low > more.ci_high
                for more in line.itertuples()
                for less in line.itertuples()
            ):
                rising.append(
                    f"{mode.replace('_', '-')}: "
                    + ", ".join(f"{r.score:.1f} at {retention_percent(r.retention)}" for r in line.itertuples())
                )
        if rising:
            kind = "rises" if method in KNOWN_RISES else "rises_unknown"
            kinds.append(kind)
            notes.append(
                f"**{label(method)} scores higher as it keeps less** ({where}; {'; '.join(rising)}; the "
                f"intervals do not overlap) [{kind}]"
            )
        apart: dict[str, list[str]] = {}
        for retention, at in sorted(cells.groupby("retention"), key=lambda item: -item[0]):
            if kind := _modes_apart(at):
                by_mode = ", ".join(
                    f"{m.replace('_', '-')} {at.loc[at['question_mode'] == m, 'score'].iloc[0]:.1f}"
                    for m in modes_in_order(at["question_mode"])
                )
                apart.setdefault(kind, []).append(f"{retention_percent(retention)} kept: {by_mode}")
        for kind, lines in apart.items():
            kinds.append(kind)
            what = {
                "aware_low": "scores far lower question-aware than in the other modes",
                "aware_high": "scores far higher question-aware than in the other modes",
                "apart": "differs by more than 50 points between question modes",
            }[kind]
            notes.append(f"**{label(method)} {what}** ({where}; {'; '.join(lines)}) [{kind}]")
    keys = list(dict.fromkeys(kinds))
    marks = {kind: f"({index + 1})" for index, kind in enumerate(keys)}
    notes = [note.rsplit(" [", 1)[0] + f" {marks[note.rsplit('[', 1)[1][:-1]]}." for note in notes]
    for kind in keys:
        why = WHY.get(kind, "no known cause: read the cell's predictions")
        notes.append(f"{marks[kind]} {'Known case' if kind in WHY else 'Not a known case'}: {why}.")
    return notes


def _cell_line(row, label, small_n: int, measured: bool) -> str:
    flags = []
    if row.incomplete:
        flags.append(f"INCOMPLETE ({row.n} of {row.expected_n})")
    if row.n == 0:
        flags.append(f"no example to score: {NO_EXAMPLE_REASON}")
    if row.small_n:
        flags.append(f"small n (< {small_n})")
    flags += cell_warnings(row) if measured else []
    if not pd.isna(row.diff_vs_full) and row.n_paired < row.n:
        flags.append(f"paired on {row.n_paired}")
    diff = "" if pd.isna(row.diff_vs_full) else f"{row.diff_vs_full:+.2f}"
    return (
        f"| {label(row.method)} | {row.question_mode.replace('_', '-')} | {retention_percent(row.retention)} | "
        f"{row.batch_size} | {row.decode_batch_size} | {row.n} | {row.score:.2f} | "
        f"{_interval(row.ci_low, row.ci_high)} | {diff} | {_interval(row.diff_ci_low, row.diff_ci_high)} | "
        f"{', '.join(flags)} |"
    )


TABLE_HEAD = [
    "| method | question mode | KV kept | batch | decode batch | n | score | 95% CI | Δ vs full cache | "
    "95% CI (paired) | flags |",
    "|---|---|---:|---:|---:|---:|---:|---|---:|---|---|",
]


def _sorted_by_score(rows: pd.DataFrame) -> pd.DataFrame:
    """Methods best first by their score in the first question mode (question-aware when run; batch 1, smallest
    decode batch), each method's rows together in the modes' order, then batch and decode batch."""
    if rows.empty:
        return rows
    modes = modes_in_order(rows["question_mode"])
    reference = rows[(rows["question_mode"] == modes[0]) & (rows["batch_size"] == BASELINE_BATCH_SIZE)]
    reference = reference.sort_values("decode_batch_size").drop_duplicates("method").set_index("method")["score"]
    order = {name: index for index, name in enumerate(METHODS)}
    key = rows.assign(
        _score=-rows["method"].map(reference).fillna(rows.groupby("method")["score"].transform("max")),
        _catalogue=rows["method"].map(lambda m: order.get(m, len(order))),
        _mode=rows["question_mode"].map(modes.index),
    )
    key = key.sort_values(["_score", "_catalogue", "method", "_mode", "batch_size", "decode_batch_size"], kind="stable")
    return key.drop(columns=["_score", "_catalogue", "_mode"])


SLIDING_SETTINGS = {
    "keep": "presses compressed its global layers alone and each sliding layer held the model's own window",
    "compress": "presses compressed every layer, each compressed window still covering its window of positions",
}


def sliding_layer_notes(summary: pd.DataFrame) -> list[str]:
    """Per model with sliding-window layers, what its presses did to them, and whether that was the default."""
    if "sliding_layers" not in summary:
        return []
    notes = []
    for model, group in summary.groupby("model", sort=True):
        settings = sorted({value for value in group["sliding_layers"].fillna("") if value})
        for setting in settings:
            name = setting.split(" ", 1)[0]
            default = " (the default: `models.<name>.sliding_layers` unset)" if setting.endswith("(default)") else ""
            notes.append(
                f"**{model} has sliding-window layers**: `sliding_layers: {name}`{default}, "
                f"{SLIDING_SETTINGS.get(name, name)} (docs/sliding-layers.md)."
            )
    return notes


MULTI_TURN_HEAD = [
    "| method | KV kept | batch | decode batch | turn | n | score | 95% CI | full cache at this turn | "
    "Δ vs full cache | 95% CI (paired) | flags |",
    "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|",
]
DROP_HEAD = [
    "| method | KV kept | batch | decode batch | conversations | turn 1 | later turns | drop | 95% CI (paired) | "
    "flags |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
]


def _number(value) -> str:
    return "" if pd.isna(value) else f"{value:.2f}"


def _cell_key(row) -> tuple[str, ...]:
    return tuple(str(getattr(row, column)) for column in CELL_COLUMNS)


def multi_turn_sections(tables: MultiTurnTables, summary: pd.DataFrame, small_n: int = SMALL_N) -> list[str]:
    """summary.md's multi-turn sections (analysis.multi_turn): per dataset/task/model, each cell's score at each
    turn beside the full cache's at that turn, then the drop from turn 1 to the later turns, paired within
    conversations. Flagged as the cells' tables are: a cell the summary flags incomplete, fewer than ``small_n``
    examples at a turn (or conversations in the drop), a turn paired on fewer examples than it scored. Labels are
    the user's text: literal Markdown, as in every table here."""
    if tables.empty:
        return []
    incomplete = {_cell_key(row) for row in summary[summary["incomplete"].astype(bool)].itertuples()}

    def flags(row, n: int, what: str = "") -> str:
        marks = ["INCOMPLETE cell"] if _cell_key(row) in incomplete else []
        marks += [f"small n (< {small_n}{what})"] if n < small_n else []
        if not pd.isna(getattr(row, "diff_vs_full", float("nan"))) and row.n_paired < row.n:
            marks.append(f"paired on {row.n_paired}")
        return ", ".join(marks)

    def label_of(frame):
        label = labeller(frame)
        return lambda method: markdown_text(label(method))

    def setting(row) -> str:
        return f"{retention_percent(row.retention)} | {row.batch_size} | {row.decode_batch_size}"

    lines = [
        "## Multi-turn: score by turn",
        "",
        "In the multi-turn mode a context's questions are asked one after another on one cache: turn 1 is "
        "compressed with the first question, each later turn appends the previous answer and the next question. "
        f"Score at each turn with its {CONFIDENCE:.0%} bootstrap interval, beside the full cache's score at that turn "
        "on the same examples and the paired difference to it (results/tables/multi_turn_by_turn.csv).",
        "",
    ]
    by_turn = tables.by_turn
    label = label_of(by_turn)
    for (dataset, task, model), group in by_turn.groupby(["dataset", "task", "model"], sort=True):
        lines += [f"### {dataset} / {task} / {model} ({group['metric'].iloc[0]} x100)", ""] + MULTI_TURN_HEAD
        for row in group.itertuples():
            diff = "" if pd.isna(row.diff_vs_full) else f"{row.diff_vs_full:+.2f}"
            lines.append(
                f"| {label(row.method)} | {setting(row)} | {row.turn} | {row.n} | {row.score:.2f} | "
                f"{_interval(row.ci_low, row.ci_high)} | {_number(row.full_cache_score)} | {diff} | "
                f"{_interval(row.diff_ci_low, row.diff_ci_high)} | {flags(row, row.n)} |"
            )
        lines.append("")
    drop = tables.drop
    label = label_of(drop)
    lines += [
        "## Multi-turn: drop from turn 1 to the later turns",
        "",
        "Per conversation, turn 1's score minus the mean of its later turns' scores, averaged over conversations "
        f"(x100; positive: the score fell after turn 1), with a {CONFIDENCE:.0%} bootstrap interval over "
        "conversations: an interval that excludes 0 is a change the data shows (results/tables/multi_turn_drop.csv).",
        "",
    ]
    for (dataset, task, model), group in drop.groupby(["dataset", "task", "model"], sort=True):
        lines += [f"### {dataset} / {task} / {model} ({group['metric'].iloc[0]} x100)", ""] + DROP_HEAD
        for row in group.itertuples():
            change = "" if pd.isna(row.drop) else f"{row.drop:+.2f}"
            lines.append(
                f"| {label(row.method)} | {setting(row)} | {row.n_conversations} | {_number(row.turn_one_score)} | "
                f"{_number(row.later_turns_score)} | {change} | {_interval(row.drop_ci_low, row.drop_ci_high)} | "
                f"{flags(row, row.n_conversations, ' conversations')} |"
            )
        lines.append("")
    return lines


def summary_markdown(
    summary: pd.DataFrame,
    small_n: int = SMALL_N,
    not_run: list[dict] | None = None,
    predictions_only: list[str] | None = None,
    multi_turn: MultiTurnTables | None = None,
) -> str:
    """The table people read: warnings, then notes (what a reader should not miss), then per dataset/task/model
    one table for the full cache and one per retention, methods best first (the full cache's batch-1 rows
    heading each as the reference), then the multi-turn cells' score by turn and their drop after turn 1
    (``multi_turn``, when the study ran the mode), then the cells the config asked for that were refused before
    any job (``not_run``: each cell's target and why) and those whose answers are hidden (``predictions_only``:
    their targets), so none is silently missing."""
    label = markdown_labeller(summary)
    measured = "retention_off" in summary
    lines = ["# Summary", ""]
    lines.append(
        f"Scores are the task's metric x100 (mean over examples), with a {CONFIDENCE:.0%} bootstrap interval. "
        "Δ vs full cache is the mean per-example difference to full cache (batch 1) on the same examples, "
        "with a paired-bootstrap interval; an interval that contains 0 means no detectable difference. "
        "One table per share of the KV cache kept, methods best first by their score in the first question mode."
    )
    lines.append("")
    small = summary[summary["small_n"].astype(bool)]
    if not small.empty:
        lines.append(
            f"> **Warning: {len(small)} of {len(summary)} cells have fewer than {small_n} examples "
            f"(n = {', '.join(str(n) for n in sorted(set(small['n'])))}).** Their intervals are wide and "
            "themselves unreliable; do not rank methods on them."
        )
        lines.append("")
    incomplete = summary[summary["incomplete"].astype(bool)]
    if not incomplete.empty:
        lines.append(
            f"> **Warning: {len(incomplete)} cells are INCOMPLETE** (scored on fewer examples than the study "
            "asked for): "
            + "; ".join(
                f"{label(r.method)} {r.retention:.2f} batch {r.batch_size} decode {r.decode_batch_size} "
                f"({r.n} of {r.expected_n})"
                for r in incomplete.itertuples()
            )
            + ". They are marked below and left out of the figures."
        )
        lines.append("")
    measured_otherwise = flagged_cells(summary)
    if measured_otherwise:
        lines.append(
            f"> **Warning: {len(measured_otherwise)} cells were measured other than they asked** (their label is not "
            "what ran; read their scores as the measured setting): " + "; ".join(measured_otherwise) + "."
        )
        lines.append("")
    notes = summary_notes(summary, label) + sliding_layer_notes(summary)
    if notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in notes] + [""]
    for (dataset, task, model), group in summary.groupby(["dataset", "task", "model"], sort=True):
        metric = group["metric"].iloc[0]
        lines += [f"## {dataset} / {task} / {model} ({metric} x100)", ""]
        full = group[group["method"] == BASELINE_METHOD]
        reference = _figure_rows(full) if not full.empty else full
        if not full.empty:
            lines += ["### Full cache", ""] + TABLE_HEAD
            lines += [_cell_line(row, label, small_n, measured) for row in _sorted_by_score(full).itertuples()] + [""]
        others = group[group["method"] != BASELINE_METHOD]
        for retention in sorted(set(others["retention"]) - {FULL_RETENTION}, reverse=True):
            at = others[others["retention"] == retention]
            lines += [
                f"### {retention_percent(retention)} of the KV cache kept ({at['method'].nunique()} methods)",
                "",
            ] + TABLE_HEAD
            lines += [_cell_line(row, label, small_n, measured) for row in _sorted_by_score(reference).itertuples()]
            lines += [_cell_line(row, label, small_n, measured) for row in _sorted_by_score(at).itertuples()] + [""]
        whole = others[others["retention"] == FULL_RETENTION]
        if not whole.empty:
            lines += [
                f"### Whole cache or their own budget (retention 1.0; {whole['method'].nunique()} methods)",
                "",
            ] + TABLE_HEAD
            lines += [_cell_line(row, label, small_n, measured) for row in _sorted_by_score(reference).itertuples()]
            lines += [_cell_line(row, label, small_n, measured) for row in _sorted_by_score(whole).itertuples()] + [""]
    if multi_turn is not None:
        lines += multi_turn_sections(multi_turn, summary, small_n)
    if not_run:
        lines += [
            f"## Not run: {len(not_run)} cell(s) the config asked for",
            "",
            "Refused before any job, from the config and the method's measured properties "
            "(`snakemake -n` lists them too):",
            "",
            "| cell | why |",
            "|---|---|",
        ]
        # a refusal quotes the config (a custom press's label, a press's own error): literal text in its cell
        lines += [f"| `{cell['target']}` | {markdown_text('; '.join(cell['problems']))} |" for cell in not_run]
        lines.append("")
    if predictions_only:
        lines += [
            f"## Predictions only: {len(predictions_only)} cell(s) with hidden answers",
            "",
            "ZeroSCROLLS withholds its answers (its leaderboard scores submitted predictions): these cells' "
            "predictions are written, and no score.",
            "",
        ]
        lines += [f"- `{target}`" for target in predictions_only] + [""]
    return "\n".join(lines)
