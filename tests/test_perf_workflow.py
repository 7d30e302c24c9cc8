"""The perf pass through Snakemake on the demo (fake hardware backend), the plan, and the H200 script's --tiny run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import copy_workflow

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(workdir)}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=workdir, capture_output=True, text=True, env=env, timeout=900
    )


@pytest.fixture(scope="module")
def small_perf_study(tmp_path_factory):
    workdir = copy_workflow(tmp_path_factory.mktemp("perf_workflow"))
    config = yaml.safe_load((workdir / "config/demo.yaml").read_text())
    config["question_modes"] = ["question_aware"]
    config["perf"].update(context_lengths=[64], methods=["full_cache", "knorm"], retentions=[0.5], batch_sizes=[1, 2],
                          new_tokens=4, warmup=1, repeats=2)
    (workdir / "perf_small.yaml").write_text(yaml.safe_dump(config))
    return workdir


def test_plan_then_perf_all_then_plan_again(small_perf_study):
    workdir = small_perf_study
    before = _snakemake(workdir, "plan", "--configfile", "perf_small.yaml", "--cores", "1")
    assert before.returncode == 0, before.stderr[-3000:]
    perf_lines = [line for line in before.stdout.splitlines() if line.startswith("perf ") and "canary" in line]
    # full cache at batch 1 and 2, knorm at batch 1; knorm at batch 2 is refused, so never planned.
    assert len(perf_lines) == 3 and all(line.endswith("defaults") for line in perf_lines)
    assert "generate    26" in before.stdout and "Already done (not counted): 0" in before.stdout
    assert "Opt-in, not in the total: perf 3 jobs" in before.stdout  # the perf pass is listed apart from the study

    run = _snakemake(workdir, "perf_all", "--configfile", "perf_small.yaml", "--cores", "2")
    # the refused cell is named before any job, and the accepted cells still produce the table and figures
    assert run.returncode == 0, run.stderr[-3000:]
    refused = "synthetic/synthetic_qa/canary/knorm/question_aware/retention-0.50_batch-2_decode-1 (context 64), not run"
    assert f"refused perf target {refused}" in run.stderr and "padding collapse" in run.stderr
    assert not (workdir / "results/perf/synthetic/synthetic_qa/canary/knorm/context-64/retention-0.50_batch-2.jsonl").exists()
    with open(workdir / "results/tables/perf_summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted((r["method"], r["batch_size"]) for r in rows) == [("full_cache", "1"), ("full_cache", "2"), ("knorm", "1")]
    assert {r["hardware_backend"] for r in rows} == {"fake"} and {r["repeats"] for r in rows} == {"2"}
    for name in ("peak_memory", "itl", "energy_per_token"):
        for ext in ("png", "svg"):
            assert (workdir / f"results/figures/perf_{name}_vs_retention.{ext}").stat().st_size > 1000
    records_path = workdir / "results/perf/synthetic/synthetic_qa/canary/knorm/context-64/retention-0.50_batch-1.jsonl"
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    assert len(records) == 2 and {r["generated_tokens"] for r in records} == {4}
    # Knorm keeps half of the 63 tokens it sees; the context's 64th runs on the compressed cache, as in the engine.
    assert {r["kept_tokens"] for r in records} == {31.0} and {r["context_source"] for r in records} == {"dataset"}
    manifest = json.loads(Path(f"{records_path}.manifest.json").read_text())
    assert 0 <= manifest["job"]["harness_overhead_fraction"] < 1

    report = _snakemake(workdir, "perf_all", "--configfile", "perf_small.yaml", "--report", "perf_report.html")
    assert report.returncode == 0, report.stderr[-3000:]
    html = (workdir / "perf_report.html").read_text()
    assert "perf_itl_vs_retention.png" in html and "Mean inter-token latency" in html

    after = _snakemake(workdir, "plan", "--configfile", "perf_small.yaml", "--cores", "1")
    assert after.returncode == 0, after.stderr[-3000:]
    assert "Already done (not counted): 3" in after.stdout
    assert "measured canary on none (fake backend)" in after.stdout
    assert "Measured records: 6 runs on none (fake backend) (fake backend)." in after.stdout


def test_the_default_demo_targets_do_not_include_perf(small_perf_study):
    dry = _snakemake(small_perf_study, "-n", "--configfile", "config/demo.yaml", "--cores", "1")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "rule perf:" not in dry.stdout and "perf_summary" not in dry.stdout
