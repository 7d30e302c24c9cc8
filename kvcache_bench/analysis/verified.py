"""What a job reads of the workflow's outputs, verified first: the bytes its manifest records, intervals that hold.

A job that reads a workflow output (the ranking and the figures read summary.csv, the paired scatter per_example.csv,
the padding figure its table, the perf summary its records) reads it through here, as the score job reads
predictions (manifest.verify_against_manifest): a number edited in summary.csv was once ranked and drawn as it
stood, and summary.md, made from the unedited scores, disagreed with it (issue 51). The study's own outputs are
held to their manifests at parse as well (rules/checks.smk, 5), before Snakemake removes any job's outputs; this
is the job's own check, for what changed since the parse and for inputs no parse check reads (a committed
reference run's tables).

An interval that does not hold its point is refused here, naming the file and the row: matplotlib's "'yerr' must
not contain negative values" mid-job named neither, and the figure job that raised it had lost its outputs.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd

from kvcache_bench.manifest import ManifestMismatchError, forcerun_remedy
from kvcache_bench.study.changed_outputs import content_problem

# (point, low, high) of every interval a table carries: the mean score and its bootstrap interval, the paired gap to
# the full cache (summary.csv, and per turn multi_turn_by_turn.csv), a probe's paired difference (the padding table),
# the drop after a conversation's first turn (multi_turn_drop.csv)
INTERVALS = (
    ("score", "ci_low", "ci_high"),
    ("diff_vs_full", "diff_ci_low", "diff_ci_high"),
    ("diff", "diff_ci_low", "diff_ci_high"),
    ("drop", "drop_ci_low", "drop_ci_high"),
)
# what names a row in a message, those of them the table has
ROW_NAME_COLUMNS = ("task", "model", "method", "question_mode", "retention", "batch_size", "decode_batch_size")


class TableIntervalError(ValueError):
    """A table whose interval does not hold its point: no aggregate writes one, so the table was edited."""


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def interval_problems(table: pd.DataFrame) -> list[str]:
    """'row N (the row's cell): score 150 is outside its interval [30, 60]' for every interval of ``table`` that
    does not hold its point, and 'row N: ci_low is 'abc', not a number' for a value that is no number. Empty
    intervals (a cell with no example: all three NaN) hold nothing to draw and pass."""
    problems = []
    present = [columns for columns in INTERVALS if all(column in table.columns for column in columns)]
    for index, row in enumerate(table.to_dict("records")):
        named = ", ".join(f"{column} {row[column]}" for column in ROW_NAME_COLUMNS if column in row)
        where = f"row {index + 1}" + (f" ({named})" if named else "")  # rows after the header, from 1
        for columns in present:
            values = [_number(row[column]) for column in columns]
            # NaN read from an empty field is a cell with nothing to score; NaN from text is an edit
            not_numbers = [c for c, value in zip(columns, values) if math.isnan(value) and not pd.isna(row[c])]
            if not_numbers:
                problems += [f"{where}: {column} is {row[column]!r}, not a number" for column in not_numbers]
                continue
            point, low, high = values
            if any(math.isnan(value) for value in values):
                continue
            if not low <= point <= high:
                problems.append(f"{where}: {columns[0]} {point:g} is outside its interval [{low:g}, {high:g}]")
    return problems


def remedy_for(path: str | os.PathLike) -> str:
    """What remakes ``path``: a workflow output is forced; a committed reference run's file comes back from git."""
    if Path(path).parts[:1] == ("results",):
        return forcerun_remedy([path])
    return f"Restore it as committed (`git checkout -- {path}`), or from the run that made it."


def interval_refusal(table: pd.DataFrame, path: str | os.PathLike) -> str | None:
    problems = interval_problems(table)
    if not problems:
        return None
    return (
        f"{path} cannot be drawn as it stands, and no job of this workflow writes such a table (edited, its manifest "
        "rewritten to match): "
        + "; ".join(problems[:5])
        + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    )


def check_intervals(table: pd.DataFrame, path: str | os.PathLike) -> pd.DataFrame:
    """``table`` when every interval holds its point; else refused, naming the file, the rows and the remedy."""
    refusal = interval_refusal(table, path)
    if refusal:
        raise TableIntervalError(f"{refusal}. {remedy_for(path)}")
    return table


def verify(path: str | os.PathLike) -> str:
    """``path`` when it is byte for byte what its manifest says; else refused, naming what changed and the remedy
    (a --forcerun for a workflow output, git for a committed reference run's table)."""
    problem = content_problem(path)
    if problem:
        raise ManifestMismatchError(f"{problem}; refusing to use it. {remedy_for(path)}")
    return str(path)


def read_verified_csv(path: str | os.PathLike, **read_csv) -> pd.DataFrame:
    """A CSV output read only when it is byte for byte what its manifest says, its intervals checked."""
    verify(path)
    return check_intervals(pd.read_csv(path, **read_csv), path)


def read_summary(path: str | os.PathLike) -> pd.DataFrame:
    """summary.csv (the study's or a reference run's), verified."""
    return read_verified_csv(path)


def read_per_example(path: str | os.PathLike) -> pd.DataFrame:
    """per_example.csv, verified; ids stay text (a numeric-looking id would lose its leading zeros)."""
    return read_verified_csv(path, dtype={"id": str})


def read_multi_turn_by_turn(path: str | os.PathLike) -> pd.DataFrame:
    """multi_turn_by_turn.csv (analysis.multi_turn), verified."""
    return read_verified_csv(path)


def verified_files(paths) -> list[str]:
    """The paths of a job's input (one or a list), each checked against its manifest before anything reads it."""
    listed = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return [verify(path) for path in listed]


def summary_interval_problem(path: str | os.PathLike) -> str | None:
    """For the parse-time check: why summary.csv's (or a multi-turn table's) intervals cannot be drawn, None when
    they can (or it is no CSV pandas reads: its sha256 is what the parse checks first)."""
    try:
        table = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError):
        return None
    return interval_refusal(table, path)
