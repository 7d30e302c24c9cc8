"""The profile_cell rule: where a study cell's time goes, by kind of work, from torch.profiler (issue 31 item 1 asked
for the decode-32 cell's profile through the workflow's own rule; before it, only tools/gpu scripts profiled)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kvcache_bench.perf.cell_profile import OTHER_KIND, CellProfile, kind_of, operator_times


def event(key, count, cpu_us, device_us=0.0, kernel=False):
    return SimpleNamespace(key=key, count=count, self_cpu_time_total=cpu_us, self_device_time_total=device_us,
                           device_type="DeviceType.CUDA" if kernel else "DeviceType.CPU")


def test_on_the_gpu_every_kernel_counts_once_graph_replays_and_triton_included():
    events = [
        event("aten::mm", 10, cpu_us=500, device_us=90_000),  # its kernel's time: counted as the kernel
        event("nvjet_sm90_tst_256x152_64x4_2x1_v_bz_coopA_TNT", 10, cpu_us=0, device_us=90_000, kernel=True),
        event("aten::_scaled_dot_product_cudnn_attention", 4, cpu_us=300, device_us=12_000),
        event("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", 4, cpu_us=0, device_us=12_000, kernel=True),
        event("aten::mul", 40, cpu_us=800, device_us=30_000),
        event("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<mul>>", 40, 0, 30_000, kernel=True),
        event("void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>", 8, 0, 10_000, kernel=True),
        # a decode step replayed from a CUDA graph: kernels with no aten operator above them
        event("nvjet_sm90_tst_128x32_64x10_4x1_v_bz_TNT", 64, cpu_us=0, device_us=20_000, kernel=True),
        event("_rms_norm_forward_kernel", 64, cpu_us=0, device_us=4_000, kernel=True),  # Liger's Triton kernel
        event("LigerRMSNormFunction", 64, cpu_us=900, device_us=4_000),  # its Python scope: not counted again
        event("aten::empty", 50, cpu_us=200, device_us=0),
    ]
    gpu = operator_times(events, on_gpu=True)
    assert all(not op.name.startswith(("aten::", "Liger")) for op in gpu) and len(gpu) == 6
    summary = CellProfile("NVIDIA H200", True, examples=2, wall_seconds=0.2, operators=gpu).summary()
    assert summary["busy_seconds"] == pytest.approx(0.166)
    assert summary["host_seconds"] == pytest.approx(0.034)  # the GPU idle: Python, launches, syncs
    kinds = {k["kind"]: k for k in summary["kinds"]}
    assert kinds["matrix products"]["seconds_per_example"] == pytest.approx(0.055)
    assert kinds["attention"]["seconds"] == pytest.approx(0.012)
    assert kinds["copies, concatenation, indexing"]["seconds"] == pytest.approx(0.010)
    assert kinds[OTHER_KIND]["seconds"] == pytest.approx(0.034)
    assert sum(k["share_of_busy"] for k in summary["kinds"]) == pytest.approx(1.0, abs=1e-3)
    cpu = operator_times(events, on_gpu=False)
    assert [op.name for op in cpu][:2] == ["aten::mul", "aten::mm"]
    assert CellProfile("cpu", False, 2, 0.2, cpu).summary()["host_seconds"] is None


def test_attention_kernels_of_every_implementation_are_attention():
    for name in ("aten::scaled_dot_product_attention", "aten::_flash_attention_forward", "aten::_efficient_attention_forward"):
        assert kind_of(name) == "attention"
    assert kind_of("aten::addmm") == "matrix products" and kind_of("aten::rsqrt") == OTHER_KIND
    # flash kernels are cutlass templates: attention, not matrix products; Liger's fused kernels are elementwise
    assert kind_of("void cutlass::device_kernel<flash::FlashAttnFwdSm90<cutlass::gemm>>") == "attention"
    assert kind_of("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128>") == "matrix products"
    assert kind_of("_swiglu_forward_kernel") == kind_of("_triton_rope") == OTHER_KIND


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
