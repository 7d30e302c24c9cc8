"""The GPU measurement scripts behind reference/h200-fast-decode: their floor arithmetic and a CPU rehearsal."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "gpu"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_floor_counts_llama_8b_weights_and_shares_them_across_a_decode_batch():
    from kvcache_bench.generation.model_shapes import LLAMA_31_8B_SHAPE

    floor = load("generate_rule_h200").floor_seconds_per_example
    ceilings = {"copy_bytes_per_s": 1.0, "bf16_matmul_flop_per_s": 1.0}  # seconds read as FLOPs and bytes
    one, many = (floor(5000, 2500, rows, ceilings, LLAMA_31_8B_SHAPE) for rows in (1, 32))
    # Llama-3.1-8B: 8.03B parameters, of which the embedding and the output head are 0.525B each
    causal_attention = 32 * 2 * 2 * 32 * 128 * 5000 * 5000 / 2  # QK^T and PV over half the 5k x 5k square
    layer_weights = (one["prefill_flops"] - 2 * 4096 * 128256 - causal_attention) / (2 * 5000)
    assert layer_weights == pytest.approx(8.03e9 - 2 * 0.525e9, rel=2e-3)
    assert one["prefill_s"] == many["prefill_s"]
    # 63 steps: every weight but the embedding (7.5B, bf16) once per step, shared by the rows; K/V per row
    kv_bytes = 63 * (2500 + 63 / 2) * 2 * 32 * 8 * 128 * 2
    assert one["decode_bytes"] == pytest.approx(63 * 2 * 7.505e9 + kv_bytes, rel=2e-3)
    assert many["decode_bytes"] == pytest.approx(63 * 2 * 7.505e9 / 32 + kv_bytes, rel=2e-3)


def test_decode_step_script_runs_tiny_on_cpu(tmp_path):
    result = subprocess.run(
        [sys.executable, str(TOOLS / "decode_step_h200.py"), "--tiny", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / "decode_step_h200.json").read_text())
    assert [row["decode_batch"] for row in record["rows"]] == [1, 4]
    assert all(row["eager_step_s"] > 0 for row in record["rows"])
