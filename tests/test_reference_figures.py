"""The README's real-model figures are rebuilt by rules from the committed reference runs, and the padding
probe's table counts pads the way its columns say."""

import json

import pandas as pd
import pytest
from conftest import copy_workflow, planned_jobs, run_snakemake

from kvcache_bench.analysis.padding import padding_markdown, padding_table

REPO_REFERENCE = __import__("pathlib").Path(__file__).resolve().parents[1] / "reference"


def probe_report(tmp_path, method, pads, kept, alone, padded):
    report = {
        "task": "niah_single_2", "method": method, "retention": 0.5, "batch_size": 4, "examples": len(pads),
        "changed_answers": sum(a != b for a, b in zip(alone, padded)), "pad_tokens_per_row": pads,
        "pads_kept_per_row_and_layer": kept,
        "answers": [{"id": str(i), "score_batch_1": a, "score_padded_batch": b} for i, (a, b) in enumerate(zip(alone, padded))],
    }
    path = tmp_path / f"{method}.json"
    path.write_text(json.dumps(report))
    return str(path)


def test_pads_kept_are_counted_over_padded_rows_and_layers_only(tmp_path):
    # 4 rows, 2 layers; rows 1 and 3 are the longest of their batch (no pads) and must not dilute the counts
    path = probe_report(tmp_path, "snapkv", pads=[10, 0, 5, 0], kept=[[10, 10], [0, 0], [1, 3], [0, 0]],
                        alone=[1, 1, 0, 1], padded=[0, 1, 0, 0])
    row = padding_table([path], seed=1, n_resamples=2000).iloc[0]
    assert row["padded_rows"] == 2 and row["mean_pads_per_padded_row"] == 7.5
    assert row["mean_pads_kept"] == 6.0 and row["max_pads_kept"] == 10.0
    assert row["share_of_pads_kept"] == pytest.approx(24 / 30, abs=0.005)
    assert row["score_batch_1"] == 75.0 and row["score_padded_batch"] == 25.0 and row["diff"] == -50.0
    assert row["diff_ci_low"] <= -50.0 <= row["diff_ci_high"] <= 0.0
    assert "| SnapKV | 50% | 4 | 2 | 75.0 | 25.0 | -50.0 [" in padding_markdown(padding_table([path]))


def test_reference_figures_rebuild_from_the_committed_runs(tmp_path):
    """`snakemake reference_figures` makes every figure the committed runs allow, and the padding tables it
    rebuilds from the committed probe reports equal the committed tables (the README quotes those)."""
    workflow_copy = copy_workflow(tmp_path / "workflow", reference_runs=True)
    dry = planned_jobs(run_snakemake(workflow_copy, "reference_figures", "-n", check=True).stdout)
    runs_with_tables = [p.parent.parent.name for p in REPO_REFERENCE.glob("*/tables/summary.csv")]
    assert dry.get("reference_figure_quality_vs_retention") == len(runs_with_tables)
    assert dry.get("reference_figure_batch_size") == dry.get("reference_figure_paired_scatter") == len(runs_with_tables)
    # two needle grids and the question grid (14 presses), and Gemma 3's RULER at 50% (12), 75% and 25% kept (11
    # each): past eight
    assert dry.get("reference_figure_quality_by_family") == 6
    run_snakemake(workflow_copy, "reference_figures", "--cores", "1", check=True)
    for run in runs_with_tables:
        png = workflow_copy / "results/reference" / run / "figures/quality_vs_retention.png"
        assert png.stat().st_size > 5_000 and png.with_name(png.name + ".manifest.json").exists()
    # every figure it draws keeps the layout rules (kvcache_bench/analysis/layout.py), recorded in its manifest
    drawn = sorted((workflow_copy / "results/reference").rglob("*.png"))
    assert len(drawn) >= 3 * len(runs_with_tables)
    for png in drawn:
        layout = json.loads(png.with_name(png.name + ".manifest.json").read_text())["layout"]
        assert layout["problems"] == [] and layout["width_px"] <= 2400, (png, layout["problems"])
    # the question-mode run: one block of rows per retention, readable (not a cluster of dots at one x)
    question = workflow_copy / "results/reference/h200-smollm2-other-question/figures/question_change.png"
    assert json.loads(question.with_name(question.name + ".manifest.json").read_text())["layout"]["height_px"] > 1500
    committed = sorted(REPO_REFERENCE.glob("*/tables/padding_probe/*/*.csv"))
    for table in committed:
        run, relative = table.relative_to(REPO_REFERENCE).parts[0], table.relative_to(REPO_REFERENCE / table.relative_to(REPO_REFERENCE).parts[0])
        rebuilt = workflow_copy / "results/reference" / run / relative
        rebuilt_table, committed_table = pd.read_csv(rebuilt), pd.read_csv(table)
        # Counts and means are exact; a bootstrap interval's ends may move by a resample's quantile between numpy
        # versions (the GPU machine's 2.5 against the pinned 2.4), never by more than a few points.
        bounds = [c for c in committed_table if c.endswith(("_ci_low", "_ci_high"))]
        pd.testing.assert_frame_equal(rebuilt_table.drop(columns=bounds), committed_table.drop(columns=bounds))
        assert (rebuilt_table[bounds] - committed_table[bounds]).abs().max().max() <= 3.0
        assert (workflow_copy / "results/reference" / run / "figures/padding_probe" / relative.parent.name / relative.name.replace(".csv", ".png")).exists()
