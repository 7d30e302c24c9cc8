"""Does the ranking hold? Each press's rank on one model against its rank on another, with a rank correlation.

A comparison has two sides, A and B, each a model's committed runs (``reference/<run>/tables/``) with a filter:
the model's name, the datasets to read, and optionally one question mode or one retention. Which comparisons are
made is declared in ``reference/ranking-across-models.yaml`` (``read_comparisons``); ``rule ranking_across_models``
writes ``results/reference/ranking_across_models.{md,csv}`` and ``..._presses.csv`` from it.

What is compared with what:

- **Settings.** A row of the result is one retention and question mode on A against one on B. A setting that
  neither side fixes is joined by equality (every retention below 1.0 and every question mode both sides ran);
  one that both fix is compared as declared (question-aware on A against question-agnostic on B, say). One side
  fixing it and the other not is refused: which of B's settings A's would meet is then unsaid.
- **Tasks.** A press's score on a side is the mean over the pooled *task names* (``tasks``, else every task name
  both sides have) of its mean score x100 on that task, a task run at several lengths (RULER's ``ruler-1k`` and
  ``ruler-2k`` datasets) being first averaged over its lengths. Each task name weighs the same on both sides
  whatever lengths each ran, so SmolLM2's 1k/2k RULER and a 4k run of another model average the same mix of
  tasks; every table says which cells each side pooled.
- **Presses.** Those with a complete cell (batch 1, the side's smallest decode batch, every example scored) at
  every pooled task on both sides. The full cache is left out: it compresses nothing, so it is no press at the
  retention compared (its cells are at retention 1.0), and it tops nearly every model's table, an agreement at
  the top that would raise the correlation without saying anything about the presses' order. Its pooled score is
  shown beside each row for scale. Fewer than ``MIN_PRESSES`` presses in both is refused, naming the runs.

The statistics:

- Ranks: 1 = highest pooled score; tied scores share the mean of their ranks (average ranks).
- Spearman's rho: Pearson's correlation of the two sides' average ranks (scipy.stats.spearmanr's definition).
- Kendall's tau-b: (concordant - discordant pairs) / sqrt(pairs untied on A x pairs untied on B)
  (scipy.stats.kendalltau's default).
- Their 95% intervals: percentile bootstrap over examples. In each replicate every pooled cell's examples are
  drawn again with replacement, one draw per (side, dataset, task) shared by all of that side's presses (they
  saw the same rows, as the summary's paired gaps resample them), and the two sides drawn independently (two
  models saw different rows). A replicate in which one side's presses all tie has no correlation; the intervals
  are over the others and their count is reported. Each side's draws come from a generator named by the seed,
  the comparison, the side and the cell, so a row's interval does not move when comparisons are added.

The interval says what another draw of the rows could do to these presses' ranks; it says nothing about presses
not in the study, nor about how the presses would order on other tasks.

Only numpy and pandas (no scipy): the rule runs in envs/analysis.yaml.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from kvcache_bench.analysis.aggregate import (
    BASELINE_BATCH_SIZE,
    BASELINE_METHOD,
    CELL_COLUMNS,
    CONFIDENCE,
    retention_percent,
)
from kvcache_bench.analysis.versus import modes_in_order
from kvcache_bench.escaping import markdown_text
from kvcache_bench.manifest import verify_against_manifest
from kvcache_bench.methods.registry import FULL_RETENTION, METHODS, method_label
from kvcache_bench.study.question_modes import QUESTION_MODES

COMPARISONS_FILE = "reference/ranking-across-models.yaml"
MIN_PRESSES = 3
SIDES = ("a", "b")
SETTINGS = ("retention", "question_mode")
# Pooled means are sums of per-example scores in one order; rounding off the last bits keeps two presses that
# scored alike on every example tied, whatever order their floats were added in.
TIE_DECIMALS = 9

COMPARISON_KEYS = {"name", "title", "readme", "tasks", "a", "b"}
SIDE_KEYS = {"label", "model", "runs", "datasets", "question_mode", "retention"}

CORRELATION_COLUMNS = [
    "comparison",
    "title",
    "readme",
    "tasks",
    *(
        f"{side}_{column}"
        for side in SIDES
        for column in ("label", "model", "runs", "cells", "retention", "question_mode", "full_cache_score")
    ),
    "n_presses",
    "presses",
    "left_out",
    "spearman_rho",
    "spearman_ci_low",
    "spearman_ci_high",
    "kendall_tau",
    "kendall_ci_low",
    "kendall_ci_high",
    "n_resamples",
    "undefined_resamples",
    "seed",
]
PRESS_COLUMNS = [
    "comparison",
    "a_retention",
    "a_question_mode",
    "b_retention",
    "b_question_mode",
    "method",
    "label",
    "a_score",
    "a_rank",
    "b_score",
    "b_rank",
    "rank_change",
]


class ComparisonError(ValueError):
    """A declared comparison that cannot be made: a bad declaration, or too few presses in both runs."""


# ----------------------------------------------------------------------------- the declaration


@dataclass(frozen=True)
class Side:
    """One model's runs and the cells of them a comparison reads."""

    label: str
    model: str
    runs: tuple[str, ...]
    datasets: tuple[str, ...] | None = None  # None: every dataset of the runs
    question_mode: str | None = None  # None: joined on equality with the other side
    retention: float | None = None

    def describe_runs(self) -> str:
        return ", ".join(self.runs)


@dataclass(frozen=True)
class Comparison:
    name: str
    title: str
    a: Side
    b: Side
    tasks: tuple[str, ...] | None = None  # None: the task names both sides have
    readme: bool = False
    sides: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "sides", {"a": self.a, "b": self.b})

    def as_params(self) -> dict:
        """Plain data, for a rule's params (a changed declaration reruns the job) and the manifest."""
        return {
            "name": self.name,
            "title": self.title,
            "readme": self.readme,
            "tasks": list(self.tasks) if self.tasks is not None else None,
            **{
                letter: {
                    "label": side.label,
                    "model": side.model,
                    "runs": list(side.runs),
                    "datasets": list(side.datasets) if side.datasets is not None else None,
                    "question_mode": side.question_mode,
                    "retention": side.retention,
                }
                for letter, side in self.sides.items()
            },
        }


def _names(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not value:
        raise ComparisonError(f"{where} must be a non-empty list of names, got {value!r}")
    if not all(isinstance(item, str) and item for item in value):
        raise ComparisonError(f"{where} must list names (text), got {value!r}")
    if len(set(value)) != len(value):
        raise ComparisonError(f"{where} names one twice: {value!r}")
    return tuple(value)


def _unknown_keys(given: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        keys = ", ".join(sorted(allowed))
        raise ComparisonError(f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {keys}")


def _side(raw, where: str) -> Side:
    if not isinstance(raw, dict):
        raise ComparisonError(f"{where} must be a mapping (model, runs, ...), got {raw!r}")
    _unknown_keys(raw, SIDE_KEYS, where)
    for key in ("model", "runs"):
        if key not in raw:
            raise ComparisonError(f"{where} has no {key}")
    if not isinstance(raw["model"], str) or not raw["model"]:
        raise ComparisonError(f"{where}.model must be the model's name in the runs' tables, got {raw['model']!r}")
    runs = _names(raw["runs"], f"{where}.runs")
    for run in runs:
        if "/" in run or run in (".", ".."):  # a folder of reference/, not a path out of it
            raise ComparisonError(f"{where}.runs names {run!r}: give a run's folder name under reference/")
    mode = raw.get("question_mode")
    if mode is not None and mode not in QUESTION_MODES:
        raise ComparisonError(f"{where}.question_mode is {mode!r}; the modes are {', '.join(QUESTION_MODES)}")
    retention = raw.get("retention")
    if retention is not None:
        if isinstance(retention, bool) or not isinstance(retention, (int, float)) or not 0 < retention <= 1:
            raise ComparisonError(f"{where}.retention must be a share of the cache kept in (0, 1], got {retention!r}")
        retention = float(retention)
    datasets = _names(raw["datasets"], f"{where}.datasets") if raw.get("datasets") is not None else None
    label = raw.get("label") or raw["model"]
    if not isinstance(label, str):
        raise ComparisonError(f"{where}.label must be text, got {label!r}")
    return Side(label, raw["model"], runs, datasets, mode, retention)


def parse_comparisons(raw, source: str = COMPARISONS_FILE) -> list[Comparison]:
    """The comparisons a declaration holds, each checked; a refusal names ``source`` and the key."""
    if raw is None:
        return []
    if not isinstance(raw, dict) or set(raw) - {"comparisons"}:
        raise ComparisonError(f"{source}: expected one key, comparisons (a list), got {raw!r:.200}")
    entries = raw.get("comparisons") or []
    if not isinstance(entries, list):
        raise ComparisonError(f"{source}: comparisons must be a list, got {entries!r:.200}")
    comparisons, seen = [], set()
    for index, entry in enumerate(entries):
        where = f"{source}: comparisons[{index}]"
        if not isinstance(entry, dict):
            raise ComparisonError(f"{where} must be a mapping, got {entry!r:.200}")
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
            raise ComparisonError(f"{where}.name must be lower-case letters, digits, '.', '_' or '-', got {name!r}")
        where = f"{source}: comparison {name!r}"
        if name in seen:
            raise ComparisonError(f"{where} is declared twice")
        seen.add(name)
        _unknown_keys(entry, COMPARISON_KEYS, where)
        for letter in SIDES:
            if letter not in entry:
                raise ComparisonError(f"{where} has no side {letter} (a: one model's runs, b: the other's)")
        a, b = _side(entry["a"], f"{where}.a"), _side(entry["b"], f"{where}.b")
        for setting in SETTINGS:
            if (getattr(a, setting) is None) != (getattr(b, setting) is None):
                raise ComparisonError(
                    f"{where}: {setting} is fixed on one side only; fix it on both (A's setting against B's) or "
                    "on neither (joined where both sides ran the same)"
                )
        tasks = _names(entry["tasks"], f"{where}.tasks") if entry.get("tasks") is not None else None
        readme = entry.get("readme", False)
        if not isinstance(readme, bool):
            raise ComparisonError(f"{where}.readme must be true or false, got {readme!r}")
        title = entry.get("title") or f"{a.label} against {b.label}"
        comparisons.append(Comparison(name, str(title), a, b, tasks, readme))
    return comparisons


def read_comparisons(path: str | Path) -> list[Comparison]:
    """The comparisons declared in ``path``; none when the file does not exist (a checkout without reference/)."""
    path = Path(path)
    if not path.exists():
        return []
    return parse_comparisons(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


def comparisons_from_params(params: list[dict]) -> list[Comparison]:
    """The inverse of ``Comparison.as_params``: what the rule's script receives."""
    return parse_comparisons({"comparisons": [dict(entry) for entry in params]}, "the rule's params")


def runs_of(comparisons: list[Comparison]) -> list[str]:
    """Every run the comparisons read, each once, in declaration order."""
    return list(dict.fromkeys(run for c in comparisons for side in c.sides.values() for run in side.runs))


def table_paths(run: str, root: str = "reference") -> dict[str, str]:
    return {name: f"{root}/{run}/tables/{name}.csv" for name in ("summary", "per_example")}


# ----------------------------------------------------------------------------- the runs' tables


@dataclass
class RunTables:
    summary: pd.DataFrame
    per_example: pd.DataFrame


def read_run_tables(runs: list[str], summaries: list[str], per_examples: list[str]) -> dict[str, RunTables]:
    """Each run's summary and per-example tables (paths in the order of ``runs``), refused unless each is the file
    its manifest describes."""
    if not len(runs) == len(summaries) == len(per_examples):
        raise ValueError(f"{len(runs)} runs for {len(summaries)} summaries and {len(per_examples)} per-example tables")
    tables = {}
    for run, summary, per_example in zip(runs, summaries, per_examples):
        for path in (summary, per_example):
            verify_against_manifest(path)
        tables[run] = RunTables(pd.read_csv(summary), pd.read_csv(per_example))
    return tables


def read_committed_tables(runs: list[str], root: str | Path = "reference") -> dict[str, RunTables]:
    """``read_run_tables`` of runs committed under ``root``."""
    paths = [table_paths(run, str(root)) for run in runs]
    return read_run_tables(runs, [p["summary"] for p in paths], [p["per_example"] for p in paths])


def _same_retention(values: pd.Series, retention: float) -> pd.Series:
    return np.isclose(values.astype(float), retention, rtol=0, atol=1e-9)


def _side_rows(side: Side, tables: dict[str, RunTables], tasks: tuple[str, ...] | None, where: str):
    """The side's per-example rows and cells (summary rows), every run's, a cell in two runs counted once."""
    examples, summaries = [], []
    for run in side.runs:
        if run not in tables:
            raise ComparisonError(f"{where}: run {run!r} was not read (no reference/{run}/tables/)")
        summary, per_example = tables[run].summary, tables[run].per_example
        models = sorted(set(summary["model"]))
        if side.model not in models:
            raise ComparisonError(f"{where}: run {run} has no model {side.model!r}; its models: {', '.join(models)}")
        keep_summary = summary["model"] == side.model
        keep_examples = per_example["model"] == side.model
        if side.datasets is not None:
            keep_summary &= summary["dataset"].isin(side.datasets)
            keep_examples &= per_example["dataset"].isin(side.datasets)
        summaries.append(summary[keep_summary].assign(run=run))
        examples.append(per_example[keep_examples].assign(run=run))
    summary = pd.concat(summaries, ignore_index=True)
    per_example = pd.concat(examples, ignore_index=True)
    missing = [dataset for dataset in side.datasets or () if dataset not in set(summary["dataset"])]
    if missing:  # a misspelt length would otherwise drop out of the pool unsaid
        found = sorted(set().union(*(set(tables[run].summary["dataset"]) for run in side.runs)))
        raise ComparisonError(
            f"{where}: runs {side.describe_runs()} have no dataset {', '.join(missing)} for model {side.model}; "
            f"their datasets: {', '.join(found)}"
        )
    if tasks is not None:
        summary = summary[summary["task"].isin(tasks)]
        per_example = per_example[per_example["task"].isin(tasks)]
    # batch 1 at the side's smallest decode batch, as the figures and ranking.md read a study
    summary = summary[summary["batch_size"] == BASELINE_BATCH_SIZE]
    if not summary.empty:
        summary = summary[summary["decode_batch_size"] == summary["decode_batch_size"].min()]
    return _one_copy_per_cell(summary, per_example, where)


def _one_copy_per_cell(summary: pd.DataFrame, per_example: pd.DataFrame, where: str):
    """A cell in two runs of a side (RULER's slices share their full-cache cells) is read once when both copies
    scored every example alike; copies that differ are refused, since which to rank would be a guess."""
    cells = list(CELL_COLUMNS)
    runs_per_cell = summary.groupby(cells)["run"].agg(list)
    repeated = runs_per_cell[runs_per_cell.map(len) > 1]
    if not repeated.empty:
        copies = {
            key: sorted(zip(group["id"].astype(str), group["score"].astype(float)))
            for key, group in per_example.groupby(cells + ["run"])
        }
        for cell, runs in repeated.items():
            for run in runs[1:]:
                if copies.get((*cell, run)) != copies.get((*cell, runs[0])):
                    raise ComparisonError(
                        f"{where}: cell {'/'.join(str(v) for v in cell)} is in runs {runs[0]} and {run} with "
                        "different scores; name one of them in the side's runs"
                    )
    first_run = summary.groupby(cells)["run"].transform("first")
    summary = summary[summary["run"] == first_run]
    per_example = per_example.merge(summary[cells + ["run"]], on=cells + ["run"], how="inner")
    _agree(summary, per_example, where)
    return summary.reset_index(drop=True), per_example.reset_index(drop=True)


def _agree(summary: pd.DataFrame, per_example: pd.DataFrame, where: str) -> None:
    """A run's summary and per-example tables describe the same cells: each cell's n and mean (x100, rounded to
    2 decimals in the summary) agree. The ranks use the per-example scores, the completeness the summary's flags;
    tables of two different runs under one folder would otherwise mix silently."""
    keys = list(CELL_COLUMNS) + ["run"]
    found = per_example.groupby(keys, as_index=False)["score"].agg(examples="count", mean="mean")
    both = summary[keys + ["n", "score"]].merge(found, on=keys, how="left")
    both["examples"] = both["examples"].fillna(0).astype(int)
    off = (both["n"] > 0) & ((100 * both["mean"] - both["score"]).abs() > 0.0051)  # past the summary's rounding
    wrong = both[(both["examples"] != both["n"]) | off]
    if not wrong.empty:
        row = wrong.iloc[0]
        raise ComparisonError(
            f"{where}: run {row['run']}'s summary.csv and per_example.csv disagree on "
            f"{'/'.join(str(row[c]) for c in CELL_COLUMNS)}: n {row['n']} and score {row['score']} in the summary, "
            f"{row['examples']} examples scoring {100 * row['mean']:.4f} in per_example.csv"
            + (f" (and {len(wrong) - 1} more cells)" if len(wrong) > 1 else "")
        )


# ----------------------------------------------------------------------------- ranks and correlations


def average_ranks(scores) -> np.ndarray:
    """Rank 1 = highest, along the last axis; tied scores share the mean of the ranks they span."""
    values = np.round(np.asarray(scores, dtype=float), TIE_DECIMALS)
    above = (values[..., None, :] > values[..., :, None]).sum(axis=-1)
    tied = (values[..., None, :] == values[..., :, None]).sum(axis=-1)
    return above + (tied + 1) / 2


def spearman_rho(x, y) -> np.ndarray:
    """Spearman's rho along the last axis (Pearson's r of average ranks); nan where a side's scores all tie."""
    rx, ry = average_ranks(x), average_ranks(y)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(denominator > 0, (rx * ry).sum(axis=-1) / np.where(denominator > 0, denominator, 1), np.nan)
    return np.clip(rho, -1.0, 1.0)


def kendall_tau_b(x, y) -> np.ndarray:
    """Kendall's tau-b along the last axis; nan where a side's scores all tie."""
    x = np.round(np.asarray(x, dtype=float), TIE_DECIMALS)
    y = np.round(np.asarray(y, dtype=float), TIE_DECIMALS)
    upper = np.triu_indices(x.shape[-1], k=1)
    sx = np.sign(x[..., :, None] - x[..., None, :])[..., upper[0], upper[1]]
    sy = np.sign(y[..., :, None] - y[..., None, :])[..., upper[0], upper[1]]
    denominator = np.sqrt((sx != 0).sum(axis=-1) * (sy != 0).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(denominator > 0, (sx * sy).sum(axis=-1) / np.where(denominator > 0, denominator, 1), np.nan)
    return np.clip(tau, -1.0, 1.0)


def percentile_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    defined = values[~np.isnan(values)]
    if defined.size == 0:
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    low, high = np.quantile(defined, [tail, 1 - tail])
    return float(low), float(high)


# ----------------------------------------------------------------------------- one comparison


@dataclass
class Pool:
    """What a side pools: per task name, the datasets it ran the task on."""

    datasets_of: dict[str, list[str]]

    @property
    def cells(self) -> list[tuple[str, str]]:
        return [(dataset, task) for task, datasets in self.datasets_of.items() for dataset in datasets]

    def describe(self) -> str:
        return ", ".join(f"{dataset}/{task}" for dataset, task in self.cells)


def _pools(comparison: Comparison, summaries: dict[str, pd.DataFrame], where: str) -> tuple[list[str], dict]:
    """The task names pooled and, per side, the datasets each was run on."""
    names = {letter: set(summary["task"]) for letter, summary in summaries.items()}
    if comparison.tasks is not None:
        tasks = list(comparison.tasks)
        for letter, side in comparison.sides.items():
            missing = [task for task in tasks if task not in names[letter]]
            if missing:
                raise ComparisonError(
                    f"{where}: side {letter.upper()} (runs {side.describe_runs()}, model {side.model}) has no task "
                    f"{', '.join(missing)}; its tasks: {', '.join(sorted(names[letter])) or 'none'}"
                )
    else:
        tasks = sorted(names["a"] & names["b"])
        if not tasks:
            raise ComparisonError(
                f"{where}: no task name is in both A (runs {comparison.a.describe_runs()}: "
                f"{', '.join(sorted(names['a'])) or 'none'}) and B (runs {comparison.b.describe_runs()}: "
                f"{', '.join(sorted(names['b'])) or 'none'}); name them with tasks: and datasets:"
            )
    for task in tasks:  # the same name with another metric is another task
        metrics = {letter: set(summary.loc[summary["task"] == task, "metric"]) for letter, summary in summaries.items()}
        if metrics["a"] != metrics["b"] or len(metrics["a"]) != 1:
            raise ComparisonError(
                f"{where}: task {task} is scored with {', '.join(sorted(metrics['a']))} on A and "
                f"{', '.join(sorted(metrics['b']))} on B: not one task; leave it out of tasks:"
            )
    pools = {
        letter: Pool({task: sorted(set(summary.loc[summary["task"] == task, "dataset"])) for task in tasks})
        for letter, summary in summaries.items()
    }
    return tasks, pools


def _settings(comparison: Comparison, summaries: dict[str, pd.DataFrame], where: str) -> list[dict]:
    """The rows of the comparison: {a: (retention, mode), b: (retention, mode)}, most cache kept first."""
    a, b = comparison.a, comparison.b

    def pairs(summary):
        pressed = summary[(summary["method"] != BASELINE_METHOD)]
        return {(float(r), m) for r, m in zip(pressed["retention"], pressed["question_mode"])}

    available = {letter: pairs(summary) for letter, summary in summaries.items()}
    retentions = (
        [(a.retention, b.retention)]
        if a.retention is not None
        else [
            (r, r)
            for r in sorted({r for r, _ in available["a"]} & {r for r, _ in available["b"]}, reverse=True)
            if r < FULL_RETENTION  # the whole cache or a method's own budget: no retention to compare at
        ]
    )
    modes = (
        [(a.question_mode, b.question_mode)]
        if a.question_mode is not None
        else [(m, m) for m in modes_in_order({m for _, m in available["a"]} & {m for _, m in available["b"]})]
    )
    rows = []
    for ra, rb in retentions:
        for ma, mb in modes:
            if any(math.isclose(ra, r) and ma == m for r, m in available["a"]) and any(
                math.isclose(rb, r) and mb == m for r, m in available["b"]
            ):
                rows.append({"a": (ra, ma), "b": (rb, mb)})
    if not rows:
        raise ComparisonError(
            f"{where}: no retention and question mode to compare: A (runs {a.describe_runs()}) ran "
            f"{_setting_list(available['a'])}, B (runs {b.describe_runs()}) ran {_setting_list(available['b'])}"
        )
    return rows


def _setting_list(pairs) -> str:
    return ", ".join(f"{retention_percent(r)} {m}" for r, m in sorted(pairs, reverse=True)) or "no press"


def _complete(summary: pd.DataFrame) -> pd.Series:
    return ~summary["incomplete"].astype(bool) & (summary["n"] > 0)


def _eligible(summary: pd.DataFrame, pool: Pool, setting: tuple[float, str]) -> tuple[set[str], dict[str, str]]:
    """The presses with a complete cell at every pooled task of this setting, and why each other press is not."""
    retention, mode = setting
    at = summary[_same_retention(summary["retention"], retention) & (summary["question_mode"] == mode)]
    at = at[at["method"] != BASELINE_METHOD]
    methods = set(at["method"])
    reasons: dict[str, str] = {}
    for dataset, task in pool.cells:
        cell = at[(at["dataset"] == dataset) & (at["task"] == task)]
        complete = set(cell.loc[_complete(cell), "method"])
        for method in sorted(methods - complete):
            if method in reasons:
                continue
            row = cell[cell["method"] == method]
            if row.empty:
                reasons[method] = f"no cell {dataset}/{task}"
            elif int(row["n"].iloc[0]) == 0:  # other_question on contexts of one question each: nothing to score
                reasons[method] = f"{dataset}/{task} has no example scored"
            else:
                reasons[method] = (
                    f"{dataset}/{task} incomplete ({int(row['n'].iloc[0])} of {int(row['expected_n'].iloc[0])})"
                )
    return methods - set(reasons), reasons


def _example_matrix(per_example: pd.DataFrame, presses: list[str], dataset: str, task: str, setting, where: str):
    """presses x examples of one pooled cell, the examples in one order for every press."""
    retention, mode = setting
    rows = per_example[
        (per_example["dataset"] == dataset)
        & (per_example["task"] == task)
        & (per_example["question_mode"] == mode)
        & _same_retention(per_example["retention"], retention)
        & per_example["method"].isin(presses)
    ]
    matrix = rows.pivot_table(index="method", columns="id", values="score", aggfunc="first").reindex(presses)
    if matrix.isna().any().any():
        short = [m for m in presses if matrix.loc[m].isna().any()]
        raise ComparisonError(
            f"{where}: {dataset}/{task} at {retention_percent(retention)} {mode}: presses {', '.join(short)} lack "
            "examples the others scored; their cells are not of the same rows"
        )
    return matrix.to_numpy(dtype=float)


def _rng(seed: int, comparison: str, letter: str, setting, dataset: str, task: str) -> np.random.Generator:
    name = f"ranking_across_models:{comparison}:{letter}:{setting[0]!r}:{setting[1]}:{dataset}/{task}"
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def _draw_counts(rng: np.random.Generator, n: int, n_resamples: int) -> np.ndarray:
    """replicates x examples: how often each example is drawn when n are drawn with replacement (as
    aggregate.bootstrap_mean_ci draws them), so that one draw serves every press of the cell."""
    drawn = rng.integers(0, n, size=(n_resamples, n))
    offsets = (np.arange(n_resamples) * n)[:, None]
    return np.bincount((drawn + offsets).ravel(), minlength=n_resamples * n).reshape(n_resamples, n)


def _pooled(means_of: dict[tuple[str, str], np.ndarray], pool: Pool) -> np.ndarray:
    """Mean over task names of the mean over each task's datasets: each task name weighs the same."""
    per_task = [
        np.mean([means_of[(dataset, task)] for dataset in datasets], axis=0)
        for task, datasets in pool.datasets_of.items()
    ]
    return np.mean(per_task, axis=0)


def _full_cache_score(summary, per_example, pool: Pool, mode: str) -> float:
    """The full cache's pooled score in this question mode (its cells are at retention 1.0); nan without one."""
    means = {}
    for dataset, task in pool.cells:
        rows = per_example[
            (per_example["method"] == BASELINE_METHOD)
            & (per_example["dataset"] == dataset)
            & (per_example["task"] == task)
            & (per_example["question_mode"] == mode)
        ]
        if rows.empty:
            return math.nan
        means[(dataset, task)] = 100 * rows["score"].mean()
    return float(_pooled(means, pool))


def _labels(per_example: dict[str, pd.DataFrame]) -> dict[str, str]:
    labels = {}
    for frame in per_example.values():  # A's labels first: a custom press named on both is named as A names it
        if "label" in frame:
            for method, text in zip(frame["method"], frame["label"]):
                if isinstance(text, str) and text:
                    labels.setdefault(method, text)
    return labels


def compare(
    comparison: Comparison, tables: dict[str, RunTables], seed: int, n_resamples: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One comparison's rows (``CORRELATION_COLUMNS``) and each compared press's scores and ranks
    (``PRESS_COLUMNS``)."""
    where = f"comparison {comparison.name!r}"
    summaries, examples = {}, {}
    for letter, side in comparison.sides.items():
        at = f"{where}, side {letter.upper()}"
        summaries[letter], examples[letter] = _side_rows(side, tables, comparison.tasks, at)
    tasks, pools = _pools(comparison, summaries, where)
    labels = _labels(examples)
    correlations, presses_rows = [], []
    for setting in _settings(comparison, summaries, where):
        eligible, reasons = {}, {}
        for letter in SIDES:
            eligible[letter], reasons[letter] = _eligible(summaries[letter], pools[letter], setting[letter])
        presses = sorted(
            eligible["a"] & eligible["b"], key=lambda m: (list(METHODS).index(m) if m in METHODS else len(METHODS), m)
        )
        described = (
            f"A {retention_percent(setting['a'][0])} {setting['a'][1]} (runs {comparison.a.describe_runs()}, model "
            f"{comparison.a.model}) against B {retention_percent(setting['b'][0])} {setting['b'][1]} (runs "
            f"{comparison.b.describe_runs()}, model {comparison.b.model})"
        )
        if len(presses) < MIN_PRESSES:
            raise ComparisonError(
                f"{where}: {len(presses)} press{'es' if len(presses) != 1 else ''} with complete cells in both "
                f"({', '.join(presses) or 'none'}), {described}; a rank correlation needs {MIN_PRESSES} or more. "
                "Fix retention or question_mode on both sides to settings both ran, or name fewer tasks."
            )
        left_out = []
        for method in sorted(set(eligible["a"]) | set(eligible["b"]) | set(reasons["a"]) | set(reasons["b"])):
            if method in presses:
                continue
            why = [
                f"{letter.upper()}: {reasons[letter].get(method, 'not run')}"
                for letter in SIDES
                if method not in eligible[letter]
            ]
            left_out.append(f"{method} ({'; '.join(why)})")
        point, draws = {}, {}
        for letter in SIDES:
            means_of, resampled_of = {}, {}
            for dataset, task in pools[letter].cells:
                matrix = _example_matrix(examples[letter], presses, dataset, task, setting[letter], where)
                n = matrix.shape[1]
                means_of[(dataset, task)] = 100 * matrix.mean(axis=1)
                rng = _rng(seed, comparison.name, letter, setting[letter], dataset, task)
                resampled_of[(dataset, task)] = 100 * (_draw_counts(rng, n, n_resamples) @ matrix.T) / n
            point[letter] = _pooled(means_of, pools[letter])
            draws[letter] = _pooled(resampled_of, pools[letter])
        rho, tau = float(spearman_rho(point["a"], point["b"])), float(kendall_tau_b(point["a"], point["b"]))
        rho_draws, tau_draws = spearman_rho(draws["a"], draws["b"]), kendall_tau_b(draws["a"], draws["b"])
        rho_low, rho_high = percentile_interval(rho_draws)
        tau_low, tau_high = percentile_interval(tau_draws)
        ranks = {letter: average_ranks(point[letter]) for letter in SIDES}
        row = {
            "comparison": comparison.name,
            "title": comparison.title,
            "readme": comparison.readme,
            "tasks": ", ".join(tasks),
            "n_presses": len(presses),
            "presses": ", ".join(presses),
            "left_out": "; ".join(left_out),
            "spearman_rho": rho,
            "spearman_ci_low": rho_low,
            "spearman_ci_high": rho_high,
            "kendall_tau": tau,
            "kendall_ci_low": tau_low,
            "kendall_ci_high": tau_high,
            "n_resamples": n_resamples,
            "undefined_resamples": int(np.isnan(rho_draws).sum()),
            "seed": seed,
        }
        for letter, side in comparison.sides.items():
            retention, mode = setting[letter]
            row.update(
                {
                    f"{letter}_label": side.label,
                    f"{letter}_model": side.model,
                    f"{letter}_runs": ", ".join(side.runs),
                    f"{letter}_cells": pools[letter].describe(),
                    f"{letter}_retention": retention,
                    f"{letter}_question_mode": mode,
                    f"{letter}_full_cache_score": _full_cache_score(
                        summaries[letter], examples[letter], pools[letter], mode
                    ),
                }
            )
        correlations.append(row)
        for index, method in enumerate(presses):
            presses_rows.append(
                {
                    "comparison": comparison.name,
                    "a_retention": setting["a"][0],
                    "a_question_mode": setting["a"][1],
                    "b_retention": setting["b"][0],
                    "b_question_mode": setting["b"][1],
                    "method": method,
                    "label": labels.get(method) or method_label(method),
                    "a_score": float(point["a"][index]),
                    "a_rank": float(ranks["a"][index]),
                    "b_score": float(point["b"][index]),
                    "b_rank": float(ranks["b"][index]),
                    "rank_change": float(ranks["b"][index] - ranks["a"][index]),
                }
            )
    return pd.DataFrame(correlations, columns=CORRELATION_COLUMNS), pd.DataFrame(presses_rows, columns=PRESS_COLUMNS)


def compare_all(
    comparisons: list[Comparison], tables: dict[str, RunTables], seed: int, n_resamples: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every declared comparison: the correlations, one row per pair of settings, and the presses' ranks."""
    if not comparisons:
        raise ComparisonError(f"no comparison is declared ({COMPARISONS_FILE})")
    made = [compare(comparison, tables, seed, n_resamples) for comparison in comparisons]
    return (
        pd.concat([m[0] for m in made], ignore_index=True),
        pd.concat([m[1] for m in made], ignore_index=True),
    )


# ----------------------------------------------------------------------------- Markdown

def code(text) -> str:
    """A name (a run, a model, a dataset/task) as a code span, whatever backticks it holds; not for table cells,
    where GitHub reads a '|' even inside one."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    return f"{fence}{padded}{fence}"


def _number(value: float, digits: int = 2) -> str:
    return "undefined" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _with_interval(value: float, low: float, high: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "undefined"
    return f"{_number(value)} [{_number(low)}, {_number(high)}]"


def _rank(value: float) -> str:
    return f"{value:g}"


def _change(value: float) -> str:
    return "0" if value == 0 else f"{value:+g}".replace("-", "−")


def _codes(listed: str) -> str:
    """A CSV column's ", "-joined names, each as a code span."""
    return ", ".join(code(name) for name in str(listed).split(", "))


def _setting(row, letter: str) -> str:
    return f"{retention_percent(row[f'{letter}_retention'])} · {row[f'{letter}_question_mode'].replace('_', '-')}"


def _full(row) -> str:
    return " / ".join(
        "—" if pd.isna(row[f"{letter}_full_cache_score"]) else f"{row[f'{letter}_full_cache_score']:.1f}"
        for letter in SIDES
    )


def correlation_table(correlations: pd.DataFrame) -> list[str]:
    """One line per pair of settings: what the README block and the file's head show."""
    lines = [
        "| comparison | A | B | presses | full cache A / B | Spearman's ρ [95% CI] | Kendall's τ-b [95% CI] |",
        "|---|---|---|---:|---|---|---|",
    ]
    for _, row in correlations.iterrows():
        lines.append(
            f"| {markdown_text(row['comparison'])} | {_setting(row, 'a')} | {_setting(row, 'b')} | "
            f"{int(row['n_presses'])} | {_full(row)} | "
            f"{_with_interval(row['spearman_rho'], row['spearman_ci_low'], row['spearman_ci_high'])} | "
            f"{_with_interval(row['kendall_tau'], row['kendall_ci_low'], row['kendall_ci_high'])} |"
        )
    return lines


def method_note(correlations: pd.DataFrame) -> str:
    seeds = sorted(set(int(s) for s in correlations["seed"]))
    resamples = sorted(set(int(b) for b in correlations["n_resamples"]))
    return (
        "A press's score on a side is its mean score ×100 over the pooled task names, each task name weighing the "
        "same (a task run at several lengths is first averaged over them); ranks are 1 = best, ties sharing the mean "
        "of their ranks. Spearman's ρ is the correlation of the two sides' ranks, Kendall's τ-b the share of press "
        "pairs ordered alike less those ordered oppositely (ties corrected). The full cache is not ranked (it "
        "compresses nothing; its pooled score is shown for scale). Only presses with complete cells at every pooled "
        f"task on both sides are ranked, batch 1. 95% intervals: percentile bootstrap, B = "
        f"{', '.join(f'{b:,}' for b in resamples)} resamples of each cell's examples (one draw per cell shared by "
        "that side's presses, the two sides drawn independently), seed "
        f"{', '.join(str(s) for s in seeds)}: what another draw of the rows could do to these presses' ranks, "
        "nothing about presses or tasks not compared."
    )


def ranking_across_models_markdown(correlations: pd.DataFrame, presses: pd.DataFrame) -> str:
    """The file people read: every comparison's correlations, then per pair of settings each press's two ranks."""
    lines = ["# Does the ranking hold? Presses ranked on one model against another", "", method_note(correlations), ""]
    lines += correlation_table(correlations) + [""]
    for name, rows in correlations.groupby("comparison", sort=False):
        first = rows.iloc[0]
        lines += [f"## {markdown_text(first['title'])}", ""]
        for letter in SIDES:
            lines.append(
                f"- **{letter.upper()}**: {markdown_text(first[f'{letter}_label'])}: model "
                f"{code(first[f'{letter}_model'])}, runs {_codes(first[f'{letter}_runs'])}; "
                f"cells pooled: {_codes(first[f'{letter}_cells'])}"
            )
        lines += [f"- Task names pooled (a mean over them, each weighing the same): {_codes(first['tasks'])}", ""]
        for _, row in rows.iterrows():
            lines += [
                f"### {_setting(row, 'a')} (A) against {_setting(row, 'b')} (B): ρ = "
                f"{_with_interval(row['spearman_rho'], row['spearman_ci_low'], row['spearman_ci_high'])}, "
                f"{int(row['n_presses'])} presses",
                "",
                "| press | A score | A rank | B score | B rank | B − A rank |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            mine = presses[
                (presses["comparison"] == name)
                & np.isclose(presses["a_retention"], row["a_retention"])
                & (presses["a_question_mode"] == row["a_question_mode"])
                & np.isclose(presses["b_retention"], row["b_retention"])
                & (presses["b_question_mode"] == row["b_question_mode"])
            ].sort_values(["a_rank", "b_rank", "method"])
            for _, press in mine.iterrows():
                lines.append(
                    f"| {markdown_text(press['label'])} | {press['a_score']:.2f} | {_rank(press['a_rank'])} | "
                    f"{press['b_score']:.2f} | {_rank(press['b_rank'])} | {_change(press['rank_change'])} |"
                )
            lines.append("")
            notes = []
            if row["undefined_resamples"]:
                notes.append(
                    f"{int(row['undefined_resamples'])} of {int(row['n_resamples'])} resamples had every press of a "
                    "side tied (no correlation); the intervals are over the others."
                )
            if isinstance(row["left_out"], str) and row["left_out"]:
                notes.append(f"Not ranked (not complete in both): {markdown_text(row['left_out'])}.")
            if notes:
                lines += [" ".join(notes), ""]
    return "\n".join(lines)


def readme_block(correlations: pd.DataFrame) -> str:
    """README.md's generated block (``python tools/docs.py ranking-across-models``): the correlations alone, with
    how they are made in one paragraph; the presses' ranks are in results/reference/ranking_across_models.md."""
    lines = [
        "Does a press's rank on one model hold on another? Declared in `reference/ranking-across-models.yaml`, made by "
        "`snakemake results/reference/ranking_across_models.md` (each press's two ranks; "
        "[how](docs/ranking-across-models.md)):",
        "",
        *correlation_table(correlations),
        "",
        method_note(correlations),
    ]
    return "\n".join(lines) + "\n"
