"""Every committed reference run's tables rebuild from its committed scores with this checkout's aggregation.

What `rule aggregate` (scripts/aggregate.py) and `rule ranking` do, called in-process on reference/<run>/: the
cells, expected n, seed and bootstrap settings are the ones the run's aggregate job was given (its summary.csv's
manifest records them), the score files are the run's own scores/. summary.csv and per_example.csv must equal the
committed ones, and summary.md and ranking.md must equal them to the byte.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from kvcache_bench.analysis.aggregate import build_summary, per_example_frame
from kvcache_bench.analysis.ranking import ranking_markdown
from kvcache_bench.analysis.summary_markdown import summary_markdown
from kvcache_bench.manifest import require_made_with, verify_against_manifest
from kvcache_bench.study.cell_checks import Cell
from kvcache_bench.study.cells import CELL_PATTERN, retention_label

pytestmark = pytest.mark.unit

REFERENCE = Path(__file__).resolve().parents[1] / "reference"
RUNS = sorted(path.parent.parent.name for path in REFERENCE.glob("*/tables/summary.csv"))

# Tabulated before commit b55c749 (2026-12-01 23:05) gave summary.csv and per_example.csv each method's `label`
# column and rewrote summary.md's layout (a table per retention, best first, a Notes block). These tables are
# what their own commits' code writes: without `label` the rebuilt csvs equal them (the test below), and each
# summary.md is byte for byte what its commit's summary_markdown makes from the committed summary.csv (checked
# by hand in git worktrees of those commits on 2026-12-03). Remaking them here would break their manifests.
MADE_BEFORE_THE_LABEL_COLUMN = {
    "h200-smollm2-other-question": "2194a00",
    "h200-smollm2-needle": "ce9bed1",
}

# Tabulated at adbfc56, before issue 51: kvzip's own error, five lines long, stood raw in summary.md's "Not run"
# table, and its line breaks ended the table's row mid-cell. A refusal is now one line of escaped Markdown
# (kvcache_bench.escaping.markdown_text); the rest of the file is what it was, and the committed file stays as its
# commit wrote it (remaking it would break its manifest).
REFUSALS_OVER_SEVERAL_LINES = {"h200-smollm2-needle-warm-once": "adbfc56"}


def read_back(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as a reader of its csv sees it (scripts/aggregate.py writes `to_csv(index=False)`)."""
    return pd.read_csv(io.StringIO(frame.to_csv(index=False)))


def rebuild(run: str) -> dict:
    """scripts/aggregate.py on a committed run: its accepted cells' scores, less those their check refused."""
    tables = REFERENCE / run / "tables"
    manifest = json.loads((tables / "summary.csv.manifest.json").read_text())
    params = manifest["params"]
    not_run = list(params.get("not_run", []))
    score_files, cells, expected_n = [], [], []
    for cell, expected in zip(params["cells"], params["expected_n"], strict=True):
        relative = CELL_PATTERN.format(**{**cell, "retention": retention_label(cell["retention"])})
        path = REFERENCE / run / "scores" / f"{relative}.jsonl"
        score_manifest = verify_against_manifest(path)
        require_made_with(path, score_manifest, cell)
        if score_manifest.get("not_run"):
            not_run.append({"target": Cell(**cell).target, "problems": score_manifest["not_run"]})
            continue
        score_files.append(str(path))
        cells.append(cell)
        expected_n.append(expected)
    summary = build_summary(
        score_files,
        cells,
        expected_n,
        seed=params["seed"],
        small_n=params["small_n"],
        n_resamples=params["n_resamples"],
        labels=params.get("labels"),
    )
    return {
        "params": params,
        "not_run": not_run,
        "summary": read_back(summary),
        "per_example": read_back(per_example_frame(score_files, cells, params.get("labels"))),
    }


def assert_summary_equal(rebuilt: pd.DataFrame, committed: pd.DataFrame) -> None:
    # Counts and means are exact; a bootstrap interval's end may move by a resample's quantile between numpy
    # versions (the GPU machine's 2.5 against the pinned 2.4), never by more than a few points
    # (tests/test_reference_figures.py's tolerance).
    bounds = [column for column in committed if column.endswith(("_ci_low", "_ci_high"))]
    pd.testing.assert_frame_equal(rebuilt.drop(columns=bounds), committed.drop(columns=bounds))
    assert list(rebuilt.columns) == list(committed.columns)
    assert (rebuilt[bounds].isna() == committed[bounds].isna()).all().all()
    assert (rebuilt[bounds] - committed[bounds]).abs().fillna(0.0).to_numpy().max(initial=0.0) <= 3.0


def test_every_run_with_a_summary_is_compared():
    assert len(RUNS) >= 9
    lacking_label = {run for run in RUNS if "label" not in pd.read_csv(REFERENCE / run / "tables/summary.csv")}
    assert lacking_label == set(MADE_BEFORE_THE_LABEL_COLUMN)
    for run in RUNS:  # each run's tables came with its scores: nothing compared is left out
        assert (REFERENCE / run / "tables/per_example.csv").exists() and (REFERENCE / run / "scores").is_dir()


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(
            run,
            marks=pytest.mark.xfail(
                strict=True,
                raises=AssertionError,
                reason=f"tabulated at {MADE_BEFORE_THE_LABEL_COLUMN[run]}, before b55c749 added the label column",
            ),
        )
        if run in MADE_BEFORE_THE_LABEL_COLUMN
        else run
        for run in RUNS
    ],
)
def test_reference_tables_rebuild_identically(run):
    tables = REFERENCE / run / "tables"
    rebuilt = rebuild(run)
    committed = pd.read_csv(tables / "summary.csv")
    assert_summary_equal(rebuilt["summary"], committed)
    pd.testing.assert_frame_equal(rebuilt["per_example"], pd.read_csv(tables / "per_example.csv"))
    # the Markdown from the committed csv: what the aggregate job wrote beside it, and what rule ranking reads
    params = rebuilt["params"]
    markdown = summary_markdown(committed, params["small_n"], rebuilt["not_run"], params.get("predictions_only"))
    if run in REFUSALS_OVER_SEVERAL_LINES:
        head, _, refused = markdown.partition("## Not run")
        committed_head, _, committed_refused = (tables / "summary.md").read_text().partition("## Not run")
        assert head == committed_head
        # the same words as GitHub shows them ('\|' a bar, a backslash before punctuation that character), and a
        # row per refused cell, each on one line
        shown = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", refused.replace("\\|", "|"))
        assert " ".join(shown.split()) == " ".join(committed_refused.split())
        rows = [line for line in refused.splitlines() if line.startswith("| `")]
        assert len(rows) == len(rebuilt["not_run"]) and all(row.endswith(" |") for row in rows)
    else:
        assert markdown == (tables / "summary.md").read_text()
    if (tables / "ranking.md").exists():
        assert ranking_markdown(committed, params["small_n"]) == (tables / "ranking.md").read_text()


@pytest.mark.parametrize("run", sorted(MADE_BEFORE_THE_LABEL_COLUMN))
def test_tables_made_before_the_label_column_differ_by_it_alone(run):
    tables = REFERENCE / run / "tables"
    rebuilt = rebuild(run)
    assert "labels" not in rebuilt["params"]  # the aggregate job of that commit had no labels to give
    assert_summary_equal(rebuilt["summary"].drop(columns="label"), pd.read_csv(tables / "summary.csv"))
    pd.testing.assert_frame_equal(rebuilt["per_example"].drop(columns="label"), pd.read_csv(tables / "per_example.csv"))
    if (tables / "ranking.md").exists():
        assert (
            ranking_markdown(pd.read_csv(tables / "summary.csv"), rebuilt["params"]["small_n"])
            == (tables / "ranking.md").read_text()
        )
