"""Which cells of the summary a figure draws and how it names them: the complete cells at batch 1 (one decode
batch), a panel's rows, the group, mode and ``n`` labels, and the caption lines for cells measured other than asked
or scored the same on every example."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pandas as pd

from kvcache_bench.analysis.aggregate import BASELINE_BATCH_SIZE, BASELINE_METHOD, retention_percent
from kvcache_bench.analysis.measured import MEASURED_COLUMNS, cell_warnings
from kvcache_bench.analysis.versus import labeller, modes_in_order

GROUP_COLUMNS = ("dataset", "task", "model")  # a row of panels (or a block): one task of one model
NO_BATCH_ONE_CELLS = "No complete batch-1 cells to plot."
MODE_WORDS = {  # what each question mode means, in a legend
    "question_aware": "question-aware (the press saw this question)",
    "question_agnostic": "question-agnostic (no question)",
    "other_question": "other-question (another question's cache)",
    "same_question": "same-question (this question, its slots removed)",
    "multi_turn": "multi-turn (every turn of a conversation on one cache)",
}


def _one_decode_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of the smallest decode batch size present: decode batching must not change answers, so one
    setting speaks for all (and a study that also ran others gets one line per method, not several)."""
    if frame.empty:
        return frame
    return frame[frame["decode_batch_size"] == frame["decode_batch_size"].min()]


def setting_label(batch_size: int, decode_batch_size: int) -> str:
    """A full-cache setting as the batch-size figure names it: prefill batch, and decode batch when above 1."""
    return f"batch {batch_size}" + (f"\ndecode {decode_batch_size}" if decode_batch_size > 1 else "")


def _complete(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[~frame["incomplete"].astype(bool)] if "incomplete" in frame else frame


def _mode_label(mode: str) -> str:
    return mode.replace("_", "-")


def _group_label(dataset: str, task: str, model: str) -> str:
    return f"{model} · {dataset}/{task}"


def _panel_rows(frame: pd.DataFrame, dataset: str, task: str, model: str, mode: str | None = None) -> pd.DataFrame:
    selected = (frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
    if mode is not None:
        selected &= frame["question_mode"] == mode
    return frame[selected]


def _n_text(panel: pd.DataFrame, column: str = "n") -> str:
    n_values = sorted(set(panel[column]))
    return f"n = {n_values[0]}" if len(n_values) == 1 else f"n = {n_values[0]}-{n_values[-1]}"


def flagged_lines(summary: pd.DataFrame) -> list[str]:
    """The cells a figure draws that were measured other than they asked (``analysis.measured``), one caption
    line per method and setting with the retentions it asked (a masking press is off at every retention)."""
    if summary.empty or not set(MEASURED_COLUMNS) <= set(summary.columns):
        return []
    label, flagged = labeller(summary), {}
    for row in summary.itertuples():
        if warnings := cell_warnings(row):
            measured = tuple(warning.split(", asked")[0] for warning in warnings)
            key = (
                row.model,
                row.dataset,
                row.task,
                row.question_mode,
                row.batch_size,
                row.decode_batch_size,
                row.method,
                measured,
            )
            flagged.setdefault(key, []).append(float(row.retention))
    lines = [
        f"{label(method)} asked {', '.join(retention_percent(r) for r in sorted(asked, reverse=True))} "
        f"({_group_label(dataset, task, model)} · {_mode_label(mode)}, batch {batch}, decode {decode}): "
        f"{'; '.join(measured)}"
        for (model, dataset, task, mode, batch, decode, method, measured), asked in flagged.items()
    ]
    return ["Measured other than asked (results/tables/summary.md):"] + lines if lines else []


def _drawn_retentions(rows: pd.DataFrame):
    """The retentions the methods were measured at (the full cache is a line across, not a point at 100%)."""
    compressed = rows[rows["method"] != BASELINE_METHOD]["retention"]
    return compressed if not compressed.empty else rows["retention"]


def _constant(rows: pd.DataFrame) -> bool:
    """Every cell scored the same on every example (one value, zero-width intervals): a panel of it shows nothing."""
    values = pd.concat([rows["score"], rows["ci_low"], rows["ci_high"]])
    return not rows.empty and values.nunique() == 1


def _constant_note(rows: pd.DataFrame, label, what: str) -> str:
    dataset, task, model = rows[["dataset", "task", "model"]].iloc[0]
    methods = ", ".join(dict.fromkeys(label(m) for m in rows["method"]))
    return (
        f"{_group_label(dataset, task, model)} · {what}: every cell ({methods}) scored {rows['score'].iloc[0]:g} on "
        "every example: no panel is drawn."
    )


class BatchOneCells(NamedTuple):
    """What ``batch_one_cells`` hands a figure."""

    frame: pd.DataFrame  # the cells drawn: complete, batch 1, the smallest decode batch, flat groups left out
    label: Callable[[str], str]  # a method's label (the table's, ``labels``, else the catalogue's)
    modes: list[str]  # the question modes of ``frame``, in reading order
    groups: list[tuple[str, str, str]]  # the (dataset, task, model) of ``frame``, sorted
    notes: list[str]  # a caption sentence per group left out for scoring the same everywhere


def batch_one_cells(
    summary: pd.DataFrame, labels: dict[str, str] | None = None, constant_by: tuple[str, ...] = ()
) -> BatchOneCells:
    """How the figures of the batch-1 cells (quality against retention, the family appendix, the question change)
    start: the complete cells of the full cache's batch size at the smallest decode batch, their labeller, modes
    and groups; grouped by ``constant_by`` (when given), a group whose every cell scored the same on every example
    is left out, a sentence in ``notes`` instead (a panel of it would show nothing)."""
    frame = _complete(_one_decode_batch(summary[summary["batch_size"] == BASELINE_BATCH_SIZE]))
    label = labeller(summary, labels)
    notes = []
    if constant_by and not frame.empty:
        for _, rows in frame.groupby(list(constant_by)):
            if _constant(rows):
                notes.append(
                    _constant_note(rows, label, ", ".join(map(_mode_label, modes_in_order(rows["question_mode"]))))
                )
                frame = frame.drop(rows.index)
    modes = modes_in_order(frame["question_mode"]) if not frame.empty else []
    groups = sorted(frame.groupby(list(GROUP_COLUMNS)).groups) if not frame.empty else []
    return BatchOneCells(frame, label, modes, groups, notes)
