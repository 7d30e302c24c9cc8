"""One row per cell of the study: n, mean score x100, its bootstrap CI, and the paired gap to full cache.

Uncertainty is part of the number: every mean carries a 95% percentile-bootstrap interval, and every
compressed cell carries the difference to the full cache *on the same examples* with a paired-bootstrap
interval (resampling examples, not cells, so the example-to-example spread cancels). Resampling is
seeded from the study's seed and the cell's name, so a table is reproducible and a cell's interval
does not change when other cells are added.

Cells scored on fewer examples than the study asked for are flagged ``incomplete`` and kept out of
the figures; cells with few examples are flagged ``small_n`` and the Markdown says so above the table.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from kvcache_bench.analysis.measured import MEASURED_COLUMNS, cell_warnings, flagged_cells, measure_cell
from kvcache_bench.analysis.versus import BASELINE_METHOD, labeller, modes_in_order
from kvcache_bench.files import read_jsonl
from kvcache_bench.methods.registry import FULL_RETENTION, METHODS, method_label

CELL_COLUMNS = ["dataset", "task", "model", "method", "question_mode", "retention", "batch_size", "decode_batch_size"]
GROUP_COLUMNS = ["dataset", "task", "model", "question_mode"]
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
]
CONFIDENCE = 0.95
N_RESAMPLES = 10_000
SMALL_N = 30  # below this a 95% interval from resampling is itself unreliable


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
    """Every scored example, one row each, with its cell (and its method's label): the data behind every aggregate."""
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
                }
            )
    return pd.DataFrame(rows, columns=CELL_COLUMNS + ["label", "id", "metric", "score"])


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


def _interval(low, high) -> str:
    return "" if pd.isna(low) else f"[{low:.2f}, {high:.2f}]"


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


def summary_notes(summary: pd.DataFrame, label=None) -> list[str]:
    """What a reader should not miss, one line per method and kind: a score that rises as the method keeps less
    (a lower retention's interval wholly above a higher one's), or question modes more than 50 points apart;
    then, once per kind, the known cause and the docs that explain it (or that none is known)."""
    label = label or labeller(summary)
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


def summary_markdown(
    summary: pd.DataFrame,
    small_n: int = SMALL_N,
    not_run: list[dict] | None = None,
    predictions_only: list[str] | None = None,
) -> str:
    """The table people read: warnings, then notes (what a reader should not miss), then per dataset/task/model
    one table for the full cache and one per retention, methods best first (the full cache's batch-1 rows
    heading each as the reference), then the cells the config asked for that were refused before any job
    (``not_run``: each cell's target and why) and those whose answers are hidden (``predictions_only``: their
    targets), so none is silently missing."""
    label = labeller(summary)
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
    notes = summary_notes(summary, label)
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
        lines += [f"| `{cell['target']}` | {'; '.join(cell['problems'])} |" for cell in not_run]
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
