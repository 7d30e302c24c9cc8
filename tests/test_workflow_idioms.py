"""Snakemake idioms a user relies on: benchmarks of GPU jobs, tiny jobs kept off the queue, declared manifests."""

from __future__ import annotations

import re

from conftest import REPO, run_snakemake

GPU_RULES = {"generate", "perf", "train_canary"}
# Seconds of CPU or less per job: a cluster runs them in the Snakemake process rather than queueing each.
LOCAL_RULES = {
    "check_method", "doctor", "score", "aggregate", "ranking", "figure_quality_vs_retention",
    "figure_paired_scatter", "figure_batch_size", "figure_question_change", "perf_summary", "figure_perf", "perf_all", "plan",
    "sweep_cost", "padding_probe_table", "figure_padding_probe", "figure_quality_by_family", "kvpress_export",
    "figure_needle_heatmap", "ranking_across_models", "figure_multi_turn",
}


def _rules() -> dict[str, str]:
    text = "".join(p.read_text() for p in sorted(REPO.joinpath("rules").glob("*.smk")))
    return {m.group(1): m.group(0) for m in re.finditer(r"^rule (\w+):\n(?:(?:    .*)?\n)*", text, flags=re.M)}


def _localrules() -> set[str]:
    """Rules marked ``localrule: True`` beside their own definition (no ``localrules:`` lists to keep in sync)."""
    return {name for name, block in _rules().items() if re.search(r"^    localrule: True$", block, flags=re.M)}


def test_no_localrules_list_restates_what_the_rules_say():
    text = "".join(p.read_text() for p in sorted(REPO.joinpath("rules").glob("*.smk")))
    assert not re.search(r"^localrules:", text, flags=re.M)


def test_gpu_jobs_record_a_benchmark():
    rules = _rules()
    for rule in GPU_RULES:
        assert re.search(r"^    benchmark:\n\s+f?\"benchmarks/", rules[rule], flags=re.M), rule


def test_tiny_jobs_run_locally_and_gpu_jobs_never_do():
    assert _localrules() == LOCAL_RULES
    assert not _localrules() & GPU_RULES


def test_doctor_has_no_output_so_it_always_runs():
    assert "    output:" not in _rules()["doctor"]


def test_a_configfile_replaces_config_yaml(workflow_copy):
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/demo.yaml", "--printshellcmds")
    assert result.returncode == 0, result.stderr
    assert "llama-3.1-8b-instruct" not in result.stdout and "longbench" not in result.stdout


def test_every_file_the_demo_writes_under_results_is_a_declared_output(demo_run):
    result = run_snakemake(demo_run, "--list-untracked", "--configfile", "config/demo.yaml", check=True)
    untracked = [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip().startswith("results/")]
    # `snakemake --report results/report.html` (the README's command, and tests/test_report.py) is Snakemake's
    # own output, not a rule's; anything else is, e.g., a manifest written beside an output but not declared
    assert not [path for path in untracked if path != "results/report.html"], untracked


def test_every_generate_job_left_a_benchmark(demo_run):
    benchmarks = list((demo_run / "benchmarks/generate").rglob("*.tsv"))
    assert len(benchmarks) == 78
    header, row = benchmarks[0].read_text().splitlines()[:2]
    assert header.split("\t")[:2] == ["s", "h:m:s"] and float(row.split("\t")[0]) > 0


def test_each_table_manifest_counts_its_own_rows(demo_run):
    import json

    import pandas as pd

    for table in ("summary.csv", "per_example.csv"):
        manifest = json.loads((demo_run / "results/tables" / f"{table}.manifest.json").read_text())
        assert manifest["rows"] == len(pd.read_csv(demo_run / "results/tables" / table)), table
