"""One row per cell of the study: n, mean score x100, its bootstrap CI, and the paired gap to full cache.

Uncertainty is part of the number: every mean carries a 95% percentile-bootstrap interval, and every
compressed cell carries the difference to the full cache *on the same examples* with a paired-bootstrap
interval (resampling examples, not cells, so the example-to-example spread cancels). Resampling is
seeded from the study's seed and the cell's name, so a table is reproducible and a cell's interval
does not change when other cells are added.

Cells scored on fewer examples than the study asked for are flagged ``incomplete`` and kept out of
the figures; cells with few examples are flagged ``small_n`` and the Markdown says so above the table.
This module computes the tables (``summary.csv``, ``per_example.csv``, the question-change costs);
``analysis.summary_markdown`` writes ``summary.md`` from them.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from kvcache_bench.analysis.measured import LAYER_COLUMNS, MEASURED_COLUMNS, measure_cell
from kvcache_bench.analysis.versus import BASELINE_METHOD, MULTI_TURN_MODE
from kvcache_bench.files import read_jsonl
from kvcache_bench.methods.registry import FULL_RETENTION, METHODS, method_label

CELL_COLUMNS = ["dataset", "task", "model", "method", "question_mode", "retention", "batch_size", "decode_batch_size"]
GROUP_COLUMNS = ["dataset", "task", "model", "question_mode"]
# A multi-turn example's place in its conversation (analysis.multi_turn), kept in per_example.csv; empty elsewhere
TURN_COLUMNS = ["turn", "turns", "conversation_id"]
BASELINE_BATCH_SIZE = 1
SUMMARY_COLUMNS = CELL_COLUMNS + [
    "label",
    "metric",
    "n",
    "expected_n",
    "incomplete",
    "small_n",
    "score",
    "ci_low",
    "ci_high",
    "n_paired",
    "full_cache_score",
    "diff_vs_full",
    "diff_ci_low",
    "diff_ci_high",
    *MEASURED_COLUMNS,
    *LAYER_COLUMNS,
]
CONFIDENCE = 0.95
N_RESAMPLES = 10_000
SMALL_N = 30  # below this a 95% interval from resampling is itself unreliable

# Why a cell has no example to score: said wherever the tables list such a cell (summary.md, ranking.md).
NO_EXAMPLE_REASON = "other_question and same_question use only contexts with two or more questions"


def retention_percent(retention: float) -> str:
    """50%, 12.5%, 0.1%: every digit the config gave (a rounded label would merge 0.125 into 12%)."""
    return f"{round(100 * float(retention), 8):g}%"


def cell_name(cell: dict) -> str:
    return "/".join(str(cell[column]) for column in CELL_COLUMNS)


def rng_for(seed: int, cell: dict, purpose: str) -> np.random.Generator:
    """A generator that depends only on the seed, the cell and what it is for."""
    return np.random.default_rng([int(seed), zlib.crc32(f"{purpose}:{cell_name(cell)}".encode())])


def bootstrap_mean_ci(values, rng: np.random.Generator, n_resamples: int = N_RESAMPLES, confidence: float = CONFIDENCE):
    """Percentile-bootstrap interval of the mean (same units as ``values``); (nan, nan) without data."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return math.nan, math.nan
    indices = rng.integers(0, values.size, size=(n_resamples, values.size))
    means = values[indices].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def read_scores(score_path: str | Path) -> dict[str, float]:
    """Per-example scores by example id; a repeated id is a broken file, not a heavier example."""
    records = read_jsonl(score_path)
    scores = {}
    for record in records:
        if record["id"] in scores:
            raise ValueError(f"{score_path}: example {record['id']!r} scored twice")
        scores[record["id"]] = float(record["score"])
    return scores


def _metric_of(score_path) -> str:
    records = read_jsonl(score_path)
    return records[0]["metric"] if records else ""


def _round(value: float) -> float:
    return round(value, 2) if not math.isnan(value) else math.nan


def summarize_cell(
    score_path: str | Path,
    cell: dict,
    expected_n: int | None = None,
    seed: int = 0,
    small_n: int = SMALL_N,
    n_resamples: int = N_RESAMPLES,
) -> dict:
    scores = read_scores(score_path)
    values = list(scores.values())
    n = len(values)
    low, high = bootstrap_mean_ci(values, rng_for(seed, cell, "mean"), n_resamples)
    return {
        **cell,
        "metric": _metric_of(score_path),
        "n": n,
        "expected_n": expected_n if expected_n is not None else n,
        "incomplete": bool(expected_n is not None and n < expected_n),
        "small_n": n < small_n,
        "score": _round(100 * float(np.mean(values))) if n else math.nan,
        "ci_low": _round(100 * low),
        "ci_high": _round(100 * high),
        **measure_cell(read_jsonl(score_path), cell["retention"]),
    }


def paired_difference(
    scores: dict[str, float], baseline: dict[str, float], rng: np.random.Generator, n_resamples: int = N_RESAMPLES
) -> dict:
    """Mean of (cell - baseline) x100 over the examples both scored, with its paired-bootstrap CI."""
    shared = sorted(set(scores) & set(baseline))
    if not shared:
        return {
            "n_paired": 0,
            "full_cache_score": math.nan,
            "diff_vs_full": math.nan,
            "diff_ci_low": math.nan,
            "diff_ci_high": math.nan,
        }
    differences = np.array([scores[i] - baseline[i] for i in shared])
    low, high = bootstrap_mean_ci(differences, rng, n_resamples)
    return {
        "n_paired": len(shared),
        "full_cache_score": _round(100 * float(np.mean([baseline[i] for i in shared]))),
        "diff_vs_full": _round(100 * float(differences.mean())),
        "diff_ci_low": _round(100 * low),
        "diff_ci_high": _round(100 * high),
    }


def is_baseline(cell: dict) -> bool:
    return (
        cell["method"] == BASELINE_METHOD
        and int(cell["batch_size"]) == BASELINE_BATCH_SIZE
        and float(cell["retention"]) == FULL_RETENTION
    )


def build_summary(
    score_files: list[str],
    cells: list[dict],
    expected_ns: list[int | None] | None = None,
    seed: int = 0,
    small_n: int = SMALL_N,
    n_resamples: int = N_RESAMPLES,
    labels: dict[str, str] | None = None,
) -> pd.DataFrame:
    """The study's table. Cells are those the config check accepted (the workflow passes only those).

    ``labels``: how each method is named (``registry.method_label`` with the config's custom methods: the
    aggregate rule's params); the ``label`` column carries it to every table and figure made from this one."""
    if len(score_files) != len(cells):
        raise ValueError(f"{len(score_files)} score files for {len(cells)} cells")
    if not cells:
        raise ValueError("no accepted cell to tabulate: every target was refused (see logs/generate/)")
    expected_ns = expected_ns or [None] * len(score_files)
    scores_by_cell = [read_scores(path) for path in score_files]
    baselines: dict[tuple, dict[int, dict[str, float]]] = {}
    for cell, scores in zip(cells, scores_by_cell):
        if is_baseline(cell):
            baselines.setdefault(tuple(cell[c] for c in GROUP_COLUMNS), {})[int(cell["decode_batch_size"])] = scores
    rows = []
    for path, cell, expected, scores in zip(score_files, cells, expected_ns, scores_by_cell):
        row = summarize_cell(path, cell, expected, seed, small_n, n_resamples)
        row["label"] = (labels or {}).get(cell["method"]) or method_label(cell["method"])
        baseline = baseline_scores(cell, baselines.get(tuple(cell[c] for c in GROUP_COLUMNS), {}))
        if baseline is not None:
            row.update(paired_difference(scores, baseline, rng_for(seed, cell, "paired"), n_resamples))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    # full cache first, then the methods in the registry's order, each from most to least cache kept
    method_order = {name: position for position, name in enumerate(METHODS)}
    frame["method_order"] = frame["method"].map(lambda m: method_order.get(m, len(method_order)))
    order = [
        "dataset",
        "task",
        "model",
        "question_mode",
        "method_order",
        "method",
        "retention",
        "batch_size",
        "decode_batch_size",
    ]
    frame = frame.sort_values(order, ascending=[True] * 6 + [False, True, True], kind="stable")
    if not frame["sliding_layers"].fillna("").astype(bool).any():  # no model with sliding layers: no such column
        frame = frame.drop(columns="sliding_layers")
    return frame.drop(columns="method_order").reset_index(drop=True)


def baseline_scores(cell: dict, by_decode_batch: dict[int, dict[str, float]]) -> dict[str, float] | None:
    """The full-cache (batch 1) scores a cell is compared with, None for the baseline itself.

    The reference is the full cache at the smallest decode batch size run. A compressed cell decoded in
    batches of d is compared with the full cache decoded in batches of d when the study ran it; the full
    cache at other decode or prefill batch sizes is compared with the reference, so what batching does
    to the full cache shows as its own difference.
    """
    if not by_decode_batch:
        return None
    reference = min(by_decode_batch)
    decode = int(cell["decode_batch_size"])
    if is_baseline(cell):
        return None if decode == reference else by_decode_batch[reference]
    if cell["method"] != BASELINE_METHOD and decode in by_decode_batch:
        return by_decode_batch[decode]
    return by_decode_batch[reference]


def per_example_frame(score_files: list[str], cells: list[dict], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Every scored example, one row each, with its cell (and its method's label): the data behind every aggregate.
    A multi-turn example keeps its turn, its conversation's number of turns and its conversation (``TURN_COLUMNS``),
    the per-turn tables' data. Only a study with a multi-turn cell has those columns (empty for its other modes):
    every other study's per_example.csv stays as it was, committed reference runs' included."""
    turn_columns = TURN_COLUMNS if any(cell["question_mode"] == MULTI_TURN_MODE for cell in cells) else []
    rows = []
    for path, cell in zip(score_files, cells):
        label = (labels or {}).get(cell["method"]) or method_label(cell["method"])
        for record in read_jsonl(path):
            rows.append(
                {
                    **cell,
                    "label": label,
                    "id": record["id"],
                    "metric": record["metric"],
                    "score": float(record["score"]),
                    **{column: record.get(column) for column in turn_columns},
                }
            )
    frame = pd.DataFrame(rows, columns=CELL_COLUMNS + ["label", "id", "metric", "score", *turn_columns])
    # whole numbers in the CSV ("2", not "2.0"), empty where the mode has no turns
    return frame.astype({"turn": "Int64", "turns": "Int64"}) if turn_columns else frame


QUESTION_CHANGE_COLUMNS = [
    "dataset",
    "task",
    "model",
    "method",
    "retention",
    "batch_size",
    "decode_batch_size",
    "n_paired",
    "aware_score",
    "other_score",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
]


def question_change_cost(
    per_example: pd.DataFrame, seed: int = 0, n_resamples: int = N_RESAMPLES, against: str = "other_question"
) -> pd.DataFrame:
    """Per compressed setting: question_aware - ``against`` (another question mode) x100 on the examples both
    modes scored, with its paired-bootstrap interval. Against other_question: how much of a method's score was
    chosen for the question it was shown; against question_agnostic: what seeing the question bought."""
    setting = [c for c in CELL_COLUMNS if c != "question_mode"]
    frame = per_example[per_example["method"] != BASELINE_METHOD].drop(columns=["label"], errors="ignore")
    aware = frame[frame["question_mode"] == "question_aware"]
    other = frame[frame["question_mode"] == against]
    paired = aware.merge(other, on=setting + ["id"], suffixes=("_aware", "_other"))
    rows = []
    for key, group in paired.groupby(setting, sort=True):
        # the resampling stream is named after the pair of modes ("aware-other" as before other pairs existed)
        pair = "aware-other" if against == "other_question" else f"aware-{against}"
        cell = dict(zip(setting, key), question_mode=pair)
        differences = (group["score_aware"] - group["score_other"]).to_numpy()
        low, high = bootstrap_mean_ci(differences, rng_for(seed, cell, "question_change"), n_resamples)
        rows.append(
            {
                **{c: cell[c] for c in setting},
                "n_paired": len(group),
                "aware_score": _round(100 * group["score_aware"].mean()),
                "other_score": _round(100 * group["score_other"].mean()),
                "diff": _round(100 * differences.mean()),
                "diff_ci_low": _round(100 * low),
                "diff_ci_high": _round(100 * high),
            }
        )
    return pd.DataFrame(rows, columns=QUESTION_CHANGE_COLUMNS)


# An interval as the tables print it, beside _round: summary.md (analysis.summary_markdown) and the padding table
def _interval(low, high) -> str:
    return "" if pd.isna(low) else f"[{low:.2f}, {high:.2f}]"
