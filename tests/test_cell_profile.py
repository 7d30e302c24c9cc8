"""The profile_cell rule: where a study cell's time goes, by kind of work, from torch.profiler (issue 31 item 1 asked
for the decode-32 cell's profile through the workflow's own rule; before it, only tools/gpu scripts profiled)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kvcache_bench.perf.cell_profile import OTHER_KIND, CellProfile, kind_of, operator_times


def event(key, count, cpu_us, device_us=0.0):
    return SimpleNamespace(key=key, count=count, self_cpu_time_total=cpu_us, self_device_time_total=device_us)


def test_operators_are_timed_by_their_own_time_on_the_gpu_and_kernels_are_not_counted_twice():
    events = [
        event("aten::mm", 10, cpu_us=500, device_us=90_000),
        event("nvjet_sm90_tst_256x152", 10, cpu_us=0, device_us=90_000),  # the kernel aten::mm launched
        event("aten::_scaled_dot_product_cudnn_attention", 4, cpu_us=300, device_us=12_000),
        event("aten::mul", 40, cpu_us=800, device_us=30_000),
        event("aten::cat", 8, cpu_us=100, device_us=10_000),
        event("aten::empty", 50, cpu_us=200, device_us=0),
    ]
    gpu = operator_times(events, on_gpu=True)
    assert [op.name for op in gpu] == ["aten::mm", "aten::mul", "aten::_scaled_dot_product_cudnn_attention", "aten::cat"]
    summary = CellProfile("NVIDIA H200", True, examples=2, wall_seconds=0.2, operators=gpu).summary()
    assert summary["busy_seconds"] == pytest.approx(0.142)
    assert summary["host_seconds"] == pytest.approx(0.058)  # the GPU idle: Python, launches, syncs
    kinds = {k["kind"]: k for k in summary["kinds"]}
    assert kinds["matrix products"]["seconds_per_example"] == pytest.approx(0.045)
    assert kinds["attention"]["seconds"] == pytest.approx(0.012)
    assert kinds["copies, concatenation, indexing"]["seconds"] == pytest.approx(0.010)
    assert kinds[OTHER_KIND]["seconds"] == pytest.approx(0.030)
    assert sum(k["share_of_busy"] for k in summary["kinds"]) == pytest.approx(1.0, abs=1e-3)
    cpu = operator_times(events, on_gpu=False)
    assert cpu[0].name == "aten::mul" and CellProfile("cpu", False, 2, 0.2, cpu).summary()["host_seconds"] is None


def test_attention_kernels_of_every_implementation_are_attention():
    for name in ("aten::scaled_dot_product_attention", "aten::_flash_attention_forward", "aten::_efficient_attention_forward"):
        assert kind_of(name) == "attention"
    assert kind_of("aten::addmm") == "matrix products" and kind_of("aten::rsqrt") == OTHER_KIND


def test_the_rule_profiles_a_demo_cell_on_the_cpu(workflow_copy):
    from conftest import run_snakemake

    cell = "synthetic/synthetic_qa/canary/snapkv/question_aware/retention-0.50_batch-1_decode-1"
    run_snakemake(
        workflow_copy, f"results/perf/profiles/{cell}.json", "--cores", "2", "--configfile", "config/demo.yaml", check=True
    )
    profile_path = workflow_copy / f"results/perf/profiles/{cell}.json"
    profile = json.loads(profile_path.read_text())
    rows = sum(1 for _ in open(workflow_copy / "results/data/synthetic/synthetic_qa.jsonl"))
    assert profile["examples"] == rows and profile["device"] == "cpu"
    kinds = {k["kind"]: k["seconds"] for k in profile["kinds"]}
    assert kinds["matrix products"] > 0 and kinds["attention"] > 0
    assert profile["busy_seconds"] <= profile["wall_seconds"]
    table = (workflow_copy / f"results/perf/profiles/{cell}.txt").read_text()
    assert "aten::mm" in table
    for output in (profile_path, profile_path.with_suffix(".txt")):
        manifest = json.loads(output.with_name(output.name + ".manifest.json").read_text())
        assert manifest["params"]["engine"] == "kvcache_bench"
    assert (workflow_copy / f"logs/profile_cell/{cell}.log").read_text().count("under the profiler") == 1
