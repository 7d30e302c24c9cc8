"""Perf records -> tables, without torch: the perf summary, the README's Markdown table, the hardware rule.

Records carry the hardware they came from; tables and figures refuse to mix hardware
(``MixedHardwareError``): a fake backend (CPU, or no NVML) is never compared with a real GPU, nor one GPU
model with another.

Command line (``python -m kvcache_bench.perf.tables ...``):
  table RECORDS.jsonl...   the Markdown table the README shows for reference records.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

PERF_CELL_KEYS = ["model", "method", "retention", "context_tokens", "batch_size"]
HARDWARE_KEYS = ["hardware_backend", "gpu_name"]
SUMMARY_METRICS = [
    "ttft_s",
    "itl_mean_s",
    "itl_p50_s",
    "itl_p95_s",
    "tokens_per_s",
    "decode_tokens_per_s",
    "wall_s",
    "harness_overhead_fraction",
    "torch_peak_memory_bytes",
    "driver_peak_memory_bytes",
    "kv_cache_bytes",
    "kept_tokens",
    "energy_j",
    "energy_per_token_j",
    "power_mean_w",
    "sm_clock_mean_mhz",
]


class MixedHardwareError(ValueError):
    """Records from different hardware (fake vs real, or two GPU models) were about to share a table or figure."""


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def require_one_hardware(records, what: str):
    """The one (backend, GPU model) of these records, or ``MixedHardwareError`` naming them all."""
    import pandas as pd

    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if frame.empty:
        raise ValueError(f"no performance records for {what}")
    missing = [key for key in HARDWARE_KEYS if key not in frame.columns]
    if missing:
        raise MixedHardwareError(f"{what}: records lack {missing}; cannot tell which hardware measured them")
    kinds = sorted({tuple(row) for row in frame[HARDWARE_KEYS].astype(str).itertuples(index=False)})
    if len(kinds) > 1:
        named = "; ".join(f"{backend} / {gpu}" for backend, gpu in kinds)
        raise MixedHardwareError(
            f"{what} would mix hardware ({named}). Fake-backend numbers never sit beside real ones and one "
            "GPU model never beside another: measure all cells on one GPU model (e.g. pin gpu_model on the "
            "cluster) or tabulate each hardware's records separately."
        )
    return kinds[0]


def summarize_perf(records: list[dict]):
    """One row per cell: the median over repeats of each metric, with the hardware that measured it."""
    import pandas as pd

    require_one_hardware(records, "the performance table")
    frame = pd.DataFrame(records)
    for metric in SUMMARY_METRICS:
        if metric not in frame.columns:
            frame[metric] = float("nan")
    frame[SUMMARY_METRICS] = frame[SUMMARY_METRICS].apply(pd.to_numeric, errors="coerce")
    grouped = frame.groupby(PERF_CELL_KEYS, dropna=False)
    summary = grouped[SUMMARY_METRICS].median()
    summary["repeats"] = grouped.size()
    summary["new_tokens"] = grouped["new_tokens"].first()
    for key in HARDWARE_KEYS + ["driver_version", "energy_source"]:
        summary[key] = grouped[key].first() if key in frame.columns else None
    summary = summary.reset_index()
    return summary.sort_values(
        ["model", "context_tokens", "method", "retention"], ascending=[True, True, True, False]
    ).reset_index(drop=True)


def markdown_table(summary) -> str:
    """The README's rendering of a perf summary (one hardware only)."""
    from kvcache_bench.escaping import markdown_text
    from kvcache_bench.methods.registry import METHODS

    backend, gpu = require_one_hardware(summary, "the Markdown table")
    header = (
        "| context | method | kept | TTFT (ms) | ITL mean / p50 / p95 (ms) | tokens/s | torch peak (GiB) | "
        "KV cache (MiB) | J/token | harness overhead |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [f"Hardware: {gpu} ({backend} backend).", "", header]

    def number(value, scale=1.0, digits=1):
        return (
            "n/a"
            if value is None or (isinstance(value, float) and math.isnan(value))
            else f"{value * scale:.{digits}f}"
        )

    for row in summary.to_dict("records"):
        # a method the catalogue does not know is named as the config wrote it: literal text in its cell
        label = markdown_text(METHODS[row["method"]].label if row["method"] in METHODS else row["method"])
        lines.append(
            f"| {int(row['context_tokens'])} | {label} | {row['retention'] * 100:.0f}% | "
            f"{number(row['ttft_s'], 1e3)} | "
            f"{number(row['itl_mean_s'], 1e3)} / {number(row['itl_p50_s'], 1e3)} / {number(row['itl_p95_s'], 1e3)} | "
            f"{number(row['tokens_per_s'])} | {number(row['torch_peak_memory_bytes'], 1 / 2**30, 2)} | "
            f"{number(row['kv_cache_bytes'], 1 / 2**20, 0)} | {number(row['energy_per_token_j'], 1, 2)} | "
            f"{number(row['harness_overhead_fraction'], 100, 2)}% |"
        )
    return "\n".join(lines) + "\n"


def _main(argv: list[str] | None = None) -> int:
    from kvcache_bench.files import read_jsonl

    parser = argparse.ArgumentParser(prog="python -m kvcache_bench.perf.tables", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="print the Markdown table of perf records (one hardware only)")
    table.add_argument("records", nargs="+", help="perf record JSONL files")
    args = parser.parse_args(argv)
    records = [record for path in args.records for record in read_jsonl(Path(path))]
    sys.stdout.write(markdown_table(summarize_perf(records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
