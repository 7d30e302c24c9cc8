"""The hardware floor (kvcache_bench.perf.floor, rule engine_comparison): its arithmetic on Llama-3.1-8B's
shape, the committed reference floor reproduced from the committed inputs, and the table's ratios."""

import json

import pytest
from conftest import REPO

from kvcache_bench.data.model_shapes import LLAMA_31_8B_SHAPE
from kvcache_bench.perf.floor import engine_rows, floor_per_example, markdown_table

UNIT_RATES = {"copy_bytes_per_s": 1.0, "matmul_flop_per_s": 1.0}  # seconds read as FLOPs and bytes


def test_the_floor_counts_llama_8b_weights_and_shares_them_across_a_decode_batch():
    one, many = (
        floor_per_example(LLAMA_31_8B_SHAPE, "bfloat16", UNIT_RATES, prompt_tokens=5000, kept_tokens=2500, new_tokens=64, rows=rows)
        for rows in (1, 32)
    )
    # Llama-3.1-8B: 8.03B parameters, of which the embedding and the output head are 0.525B each
    causal_attention = 32 * 2 * 2 * 32 * 128 * 5000 * 5000 / 2  # QK^T and PV over half the 5k x 5k square
    layer_weights = (one.prefill_s - 2 * 4096 * 128256 - causal_attention) / (2 * 5000)
    assert layer_weights == pytest.approx(8.03e9 - 2 * 0.525e9, rel=2e-3)
    assert one.prefill_s == many.prefill_s
    # 63 steps: every weight but the embedding (7.5B, bf16) once per step, shared by the rows; K/V per row
    kv_bytes = 63 * (2500 + 63 / 2) * 2 * 32 * 8 * 128 * 2
    assert one.decode_s == pytest.approx(63 * 2 * 7.505e9 + kv_bytes, rel=2e-3)
    assert many.decode_s == pytest.approx(63 * 2 * 7.505e9 / 32 + kv_bytes, rel=2e-3)


def test_the_committed_h200_floor_is_reproduced_from_its_measured_rates_and_cells():
    reference = json.loads((REPO / "reference/h200-fast-decode/generate_rule_h200.json").read_text())
    rates = {"copy_bytes_per_s": reference["ceilings"]["copy_bytes_per_s"], "matmul_flop_per_s": reference["ceilings"]["bf16_matmul_flop_per_s"]}
    cell = reference["paths"]["engine, decode batch 32"]
    for rows in (1, 32):
        floor = floor_per_example(LLAMA_31_8B_SHAPE, "bfloat16", rates, prompt_tokens=cell["mean_prompt_tokens"],
                                  kept_tokens=cell["mean_kept_tokens"], new_tokens=cell["mean_generated_tokens"], rows=rows)
        assert 1 / floor.total_s == pytest.approx(reference["floors"][f"floor, decode batch {rows}"]["examples_per_s"], rel=1e-9)


def records(n, seconds, decode_batch, generated=64):
    return [{"seconds": seconds, "effective_decode_batch_size": decode_batch, "prompt_tokens": 5000, "kept_tokens": 2500,
             "generated_tokens": generated} for _ in range(n)]


def test_the_table_divides_by_kvpress_pipeline_and_floors_every_decode_batch_of_this_engine():
    cells = [
        {"model": "m", "engine": "kvcache_bench", "records": records(4, 0.25, 32)},
        {"model": "m-kvpress", "engine": "kvpress_pipeline", "records": records(4, 2.0, 1, generated=None)},
        {"model": "m", "engine": "kvcache_bench", "records": records(4, 1.0, 1)},
    ]
    rates = {"copy_bytes_per_s": 4e12, "matmul_flop_per_s": 8e14}
    rows = engine_rows(cells, LLAMA_31_8B_SHAPE, "bfloat16", rates)
    assert [(r["path"], r["decode_batch_size"]) for r in rows] == [
        ("kvpress_pipeline", 1), ("kvcache_bench", 1), ("kvcache_bench", 32), ("floor", 1), ("floor", 32)
    ]
    assert [round(r["vs_kvpress_pipeline"], 6) for r in rows[:3]] == [1.0, 2.0, 8.0]
    assert rows[4]["examples_per_s"] > rows[3]["examples_per_s"] > rows[2]["examples_per_s"] / 10
    assert "| this engine, decode batch 32 | 4.00 | 8.0× |" in markdown_table(rows)
