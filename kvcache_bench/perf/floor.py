"""The hardware floor and the engine comparison, without torch: what an example cannot take less than, and
each engine's examples/s beside it, from the study's own prediction records and the measured rates.

The floor charges prefill its FLOPs at the measured matrix rate and decode its bytes at the measured copy
rate (``perf.rates``, rule measure_hardware_rates): prefill is 2 FLOPs per layer weight per prompt token,
the output head for the last token only, plus causal attention's QK^T and PV; each decode step reads every
weight but the embedding once (shared by the rows decoded together) and each row's cached keys and values.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
BASELINE_ENGINE = "kvpress_pipeline"
PATH_ORDER = {
    BASELINE_ENGINE: 0,
    "kvcache_bench": 1,
    "floor": 2,
}  # the table's rows: the baseline, this engine, the floor
KERNELS_ORDER = {"transformers": 0, "liger": 1}  # this engine on transformers' modules, then on fused kernels


@dataclass(frozen=True)
class Floor:
    prefill_s: float
    decode_s: float

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s


def floor_per_example(
    shape: dict, dtype: str, rates: dict, *, prompt_tokens: float, kept_tokens: float, new_tokens: float, rows: int
) -> Floor:
    """The least seconds one example takes at the measured rates (``shape``: the model's config.json)."""
    hidden, layers, heads, kv_heads = (
        shape[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    )
    head_dim = shape.get("head_dim") or hidden // heads
    mlp, vocab = shape["intermediate_size"], shape["vocab_size"]
    per_layer = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2 + 3 * hidden * mlp
    attention_flops = layers * 2 * 2 * heads * head_dim * prompt_tokens * prompt_tokens / 2
    prefill_flops = 2 * layers * per_layer * prompt_tokens + 2 * hidden * vocab + attention_flops
    width = DTYPE_BYTES[dtype]
    kv_bytes_per_token = 2 * layers * kv_heads * head_dim * width
    steps = max(0.0, new_tokens - 1)
    weight_bytes = (layers * per_layer + hidden * vocab) * width
    decode_bytes = steps * (weight_bytes / rows + (kept_tokens + steps / 2) * kv_bytes_per_token)
    return Floor(prefill_flops / rates["matmul_flop_per_s"], decode_bytes / rates["copy_bytes_per_s"])


def engine_rows(cells: list[dict], shape: dict, dtype: str, rates: dict) -> list[dict]:
    """One row per cell (its engine, decode batch, examples/s), then the floor at each decode batch seen.

    ``cells``: [{"model", "engine", "records"}] of one model's weights, method, retention and question mode.
    The ratio column divides by kvpress's pipeline when the study has it.
    """
    rows = []
    for cell in cells:
        records = cell["records"]
        seconds = sum(r["seconds"] for r in records)
        rows.append(
            {
                "path": cell["engine"],
                "model": cell["model"],
                "kernels": cell.get("kernels", "transformers"),
                "decode_batch_size": max(r["effective_decode_batch_size"] for r in records),
                "examples": len(records),
                "examples_per_s": len(records) / seconds,
                "prompt_tokens": statistics.mean(r["prompt_tokens"] for r in records),
                "kept_tokens": statistics.mean(r["kept_tokens"] for r in records),
                "generated_tokens": statistics.mean(
                    r["generated_tokens"] for r in records if r["generated_tokens"] is not None
                )
                if any(r["generated_tokens"] is not None for r in records)
                else None,
            }
        )
    ours = [row for row in rows if row["path"] != BASELINE_ENGINE]
    # the floor counts the tokens of the cells on transformers' modules (kvpress's model) when the table has them
    ours = [row for row in ours if row["kernels"] == "transformers"] or ours
    if ours:
        prompt, kept = ours[0]["prompt_tokens"], ours[0]["kept_tokens"]
        new_tokens = statistics.mean(row["generated_tokens"] for row in ours)
        for batch in sorted({row["decode_batch_size"] for row in ours}):
            floor = floor_per_example(
                shape, dtype, rates, prompt_tokens=prompt, kept_tokens=kept, new_tokens=new_tokens, rows=batch
            )
            rows.append(
                {
                    "path": "floor",
                    "model": ours[0]["model"],
                    "decode_batch_size": batch,
                    "examples": None,
                    "examples_per_s": 1 / floor.total_s,
                    "prefill_floor_s": floor.prefill_s,
                    "decode_floor_s": floor.decode_s,
                    "prompt_tokens": prompt,
                    "kept_tokens": kept,
                    "generated_tokens": new_tokens,
                }
            )
    rows.sort(
        key=lambda row: (
            PATH_ORDER[row["path"]],
            KERNELS_ORDER[row.get("kernels", "transformers")],
            row["decode_batch_size"],
        )
    )
    baseline = next((row["examples_per_s"] for row in rows if row["path"] == BASELINE_ENGINE), None)
    for row in rows:
        row["vs_kvpress_pipeline"] = row["examples_per_s"] / baseline if baseline else None
    return rows


def markdown_table(rows: list[dict]) -> str:
    names = {
        "kvpress_pipeline": "kvpress `KVPressTextGenerationPipeline` (batch 1)",
        "kvcache_bench": "this engine, decode batch {b}",
        "floor": "hardware floor (measured FLOP and copy rates), decode batch {b}",
    }
    fused = {"liger": "this engine on Liger's fused kernels, decode batch {b}"}
    lines = ["| path | examples/s | × kvpress's pipeline |", "|---|---:|---:|"]
    for row in rows:
        ratio = f"{row['vs_kvpress_pipeline']:.1f}×" if row["vs_kvpress_pipeline"] else "—"
        lines.append(
            f"| {fused.get(row.get('kernels'), names[row['path']]).format(b=row['decode_batch_size'])} "
            f"| {row['examples_per_s']:.2f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"
