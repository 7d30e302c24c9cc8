"""A researcher's own press, from a file in the workflow directory, through the rules: it runs, its records
name it, and an edit to its file plans again only the cells built from it."""

from __future__ import annotations

import json
import re

import yaml
from conftest import FAKE_HF_TOKEN, planned_jobs, run_snakemake, write_config

CUSTOM = {"value_norm": {"press": "presses/value_norm.py:ValueNormPress", "kwargs": {"n_sink": 2}, "label": "Value norm"}}


def _small_custom_config(workdir):
    demo = yaml.safe_load((workdir / "config/demo.yaml").read_text())
    synthetic = {**demo["datasets"]["synthetic"], "num_examples": 3}
    synthetic["synthetic"] = {**synthetic["synthetic"], "n_documents": 1, "questions_per_document": 3}
    return write_config(
        workdir, "config/demo.yaml", "custom.yaml",
        methods=["full_cache", "value_norm", "knorm"], custom_methods=CUSTOM, retentions=[0.5],
        question_modes=["question_aware"], batch_size_overrides={}, method_kwargs={},
        datasets={"synthetic": synthetic},
    )


def test_a_press_file_runs_end_to_end_and_an_edit_reruns_only_its_cells(workflow_copy):
    _small_custom_config(workflow_copy)
    run = run_snakemake(workflow_copy, "--cores", "2", "--configfile", "config/custom.yaml", env={"HF_TOKEN": FAKE_HF_TOKEN}, check=True)
    assert run.returncode == 0
    cell = "synthetic/synthetic_qa/canary/value_norm/question_aware/retention-0.50_batch-1_decode-1"
    records = [json.loads(line) for line in (workflow_copy / f"results/predictions/{cell}.jsonl").read_text().splitlines()]
    assert len(records) == 3
    assert records[0]["construction"]["class"].endswith("ValueNormPress")
    assert records[0]["construction"]["kwargs"] == {"compression_ratio": 0.5, "n_sink": 2}
    assert all(r["kept_tokens"] < r["pressed_tokens"] for r in records)  # it really evicted
    properties = json.loads((workflow_copy / "results/checks/methods/value_norm.json").read_text())
    assert properties["removes_tokens"] and not properties["masks_slots"]
    # its label names it in every table, and the figures draw it bold (figures.highlight's default: custom presses)
    summary = (workflow_copy / "results/tables/summary.csv").read_text()
    assert ",value_norm,question_aware,0.5,1,1,Value norm," in summary
    for table in ("summary.md", "ranking.md"):
        assert "| Value norm |" in (workflow_copy / "results/tables" / table).read_text(), table
    figure = json.loads((workflow_copy / "results/figures/quality_vs_retention.png.manifest.json").read_text())
    assert figure["params"]["highlight"] == {"full_cache": "Full cache", "value_norm": "Value norm"}
    assert figure["layout"]["problems"] == []

    with open(workflow_copy / "presses/value_norm.py", "a") as handle:
        handle.write("\n# a researcher's edit\n")
    dry = run_snakemake(workflow_copy, "-n", "--configfile", "config/custom.yaml", check=True).stdout
    jobs = planned_jobs(dry)
    assert jobs["generate"] == 1 and jobs["check_method"] == 1 and "check_config" not in jobs, jobs
    regenerated = re.findall(r"output: results/predictions/\S+/canary/(\w+)/", dry)
    assert regenerated == ["value_norm"], regenerated
