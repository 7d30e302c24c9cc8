"""Inputs that used to give a wrong number and exit 0 (issue 23): a source outside the DAG, a checkpoint that
does not load whole, a typo in a per-task map, a duplicate YAML key, asked and measured retention apart, outputs
only their owner can read. Each case asserts what the user reads; parse-time cases are dry runs of a copy of the
workflow, the rest call the function the job calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import copy_workflow
from test_bad_inputs import GOOD_ROW, run_with, small_config


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("inputs_in_dag") / "workflow")


def local_dataset(workdir: Path, name: str = "mine", task: str = "qasper") -> dict:
    folder = workdir / "data" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{task}.jsonl").write_text("".join(json.dumps({**GOOD_ROW, "_id": f"r{i}"}) + "\n" for i in range(3)))
    return {"source": "local", "local_path": f"data/{name}", "tasks": [task], "num_examples": 3}


def dry_run_jobs(output: str, rule: str) -> list[str]:
    """The ``input:`` line of every planned job of ``rule`` in a dry run's output."""
    lines = output.splitlines()
    return [lines[i + 1] for i, line in enumerate(lines[:-1]) if line == f"rule {rule}:"]


# ------------------------------------------------------------------------------------------ 1. sources in the DAG


def test_a_local_dataset_and_model_folder_are_inputs_of_the_jobs_that_read_them(workdir):
    """Snakemake reruns a job whose input is newer than its output: an edit in place of the data file reruns
    its data job (and so its cells), a replaced model.safetensors reruns the model's generate jobs."""
    config = small_config(workdir, datasets={"mine": local_dataset(workdir)})
    result, output = run_with(workdir, config, "-n")
    assert result.returncode == 0, output[-3000:]
    [data_job] = dry_run_jobs(output, "download_dataset")
    assert "data/mine/qasper.jsonl" in data_job
    generate_jobs = dry_run_jobs(output, "generate")
    assert len(generate_jobs) == 2
    for job in generate_jobs:
        assert "resources/canary/model.safetensors" in job and "resources/canary/config.json" in job
