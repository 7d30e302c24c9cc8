"""`rule ranking_across_models` over the committed runs' tables, as `snakemake reference_figures` runs it: the files
it writes, their manifests, what reruns it, and a comparison it must refuse (the statistics themselves:
tests/test_ranking_across_models.py)."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
import yaml
from conftest import copy_workflow, planned_jobs, run_snakemake

from kvcache_bench.analysis.ranking_across_models import (
    compare_all,
    read_committed_tables,
    read_comparisons,
    runs_of,
)
from kvcache_bench.manifest import verify_against_manifest

pytestmark = pytest.mark.workflow

TARGET = "results/reference/ranking_across_models.md"
OUTPUTS = ("ranking_across_models.md", "ranking_across_models.csv", "ranking_across_models_presses.csv")


def test_the_rule_ranks_the_declared_comparisons_from_the_committed_tables(tmp_path):
    workflow = copy_workflow(tmp_path / "workflow", reference_runs=True)
    assert planned_jobs(run_snakemake(workflow, "reference_figures", "-n", check=True).stdout)["ranking_across_models"] == 1
    run_snakemake(workflow, TARGET, "--cores", "1", check=True)
    results = workflow / "results/reference"
    for name in OUTPUTS:  # each output is the file its manifest describes
        manifest = verify_against_manifest(results / name)
        assert manifest["seed"] == 42 and manifest["params"]["n_resamples"] == 10_000
        assert [c["name"] for c in manifest["params"]["comparisons"]] == [
            "smollm2-vs-gemma3-ruler",
            "smollm2-ruler-aware-vs-agnostic", "smollm2-ruler-50-vs-10", "smollm2-haystack-vs-ruler-niah-single-2"]
        assert sorted(manifest["inputs"]) == sorted(
            f"reference/{run}/tables/{table}.csv"
            for run in ("h200-smollm2-ruler-at-50", "h200-smollm2-ruler-at-25", "h200-smollm2-ruler-at-10",
                        "h200-smollm2-needle", "h100-gemma3-ruler-4k-r50", "h100-gemma3-ruler-4k-r75-partial",
                        "h100-gemma3-ruler-4k-r25-partial")
            for table in ("summary", "per_example"))
    correlations = pd.read_csv(results / "ranking_across_models.csv")
    presses = pd.read_csv(results / "ranking_across_models_presses.csv")
    # SmolLM2 against Gemma 3 (two retentions, five presses), then the eight rows of SmolLM2's smoke tests (eight each)
    assert len(correlations) == 2 + 8 and len(presses) == 2 * 5 + 8 * 8
    # the rule's numbers are the library's on the same tables, seed and resamples
    comparisons = read_comparisons(workflow / "reference/ranking-across-models.yaml")
    expected, _ = compare_all(comparisons, read_committed_tables(runs_of(comparisons), workflow / "reference"), 42, 10_000)
    pd.testing.assert_frame_equal(correlations, pd.read_csv(io.StringIO(expected.to_csv(index=False))))
    markdown = (results / "ranking_across_models.md").read_text()
    assert markdown.startswith("# Does the ranking hold? Presses ranked on one model against another")
    assert markdown.count("\n| smollm2-") == 10 and markdown.count("\n### ") == 10
    assert "| TOVA | 68.38 | 1 | 54.38 | 3 | +2 |" in markdown  # RULER at 50%: question-aware first, agnostic third
    # made once: a second run has nothing to do, and an edit to the declaration reruns it
    assert "Nothing to be done" in run_snakemake(workflow, TARGET, "--cores", "1", check=True).stderr
    declaration = workflow / "reference/ranking-across-models.yaml"
    declaration.write_text(declaration.read_text().replace("(smoke test: one model, two modes)", "(edited)"))
    assert planned_jobs(run_snakemake(workflow, TARGET, "-n", check=True).stdout) == {"ranking_across_models": 1}


def test_a_comparison_of_too_few_presses_and_an_edited_table_are_refused(tmp_path):
    workflow = copy_workflow(tmp_path / "workflow", reference_runs=True)
    side = {"model": "smollm2-135m-instruct", "datasets": ["ruler-1k", "ruler-2k"]}
    (workflow / "reference/ranking-across-models.yaml").write_text(yaml.safe_dump({"comparisons": [{
        "name": "presses-vs-at-25",
        "a": {**side, "runs": ["h200-smollm2-ruler-presses"]},  # SnapKV and Compactor alone at 25%
        "b": {**side, "runs": ["h200-smollm2-ruler-at-25"]},
    }]}))
    refused = run_snakemake(workflow, TARGET, "--cores", "1")
    assert refused.returncode != 0 and not (workflow / "results/reference/ranking_across_models.csv").exists()
    log = (workflow / "logs/reference/ranking_across_models.log").read_text()
    assert "comparison 'presses-vs-at-25': 2 presses with complete cells in both (snapkv, compactor)" in log
    assert "runs h200-smollm2-ruler-presses" in log and "runs h200-smollm2-ruler-at-25" in log
    # a committed table edited after its run wrote it: refused by its manifest, with the command that remakes it
    (workflow / "reference/ranking-across-models.yaml").write_text(yaml.safe_dump({"comparisons": [{
        "name": "at-50-vs-at-25",
        "a": {**side, "runs": ["h200-smollm2-ruler-at-50"]},
        "b": {**side, "runs": ["h200-smollm2-ruler-at-25"]},
    }]}))
    per_example = workflow / "reference/h200-smollm2-ruler-at-25/tables/per_example.csv"
    per_example.write_text(per_example.read_text().replace(",1.0\n", ",0.0\n", 1))
    assert run_snakemake(workflow, TARGET, "--cores", "1").returncode != 0
    log = (workflow / "logs/reference/ranking_across_models.log").read_text()
    assert "reference/h200-smollm2-ruler-at-25/tables/per_example.csv is not the file its manifest describes" in log
    recorded = json.loads((per_example.parent / "per_example.csv.manifest.json").read_text())["content"]["sha256"]
    assert f"the manifest says sha256 {recorded[:12]}" in log and "--forcerun" in log
