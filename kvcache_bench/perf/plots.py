"""Perf figures from the perf summary: peak memory, inter-token latency and J/token vs KV cache kept.

One panel per (model, context length), one line per method, full cache as a dashed reference line.
A figure shows ONE hardware: the fake backend and real GPUs, or two GPU models, never share one.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from kvcache_bench.analysis.figures.palette import method_style, methods_in_order  # noqa: E402
from kvcache_bench.analysis.figures.style import STYLE  # noqa: E402
from kvcache_bench.analysis.versus import labeller  # noqa: E402
from kvcache_bench.perf.tables import require_one_hardware  # noqa: E402


def _peak_memory_gib(frame: pd.DataFrame) -> tuple[pd.Series, str]:
    # The CUDA allocator's peak where there is one; on the fake backend (CPU) the process's peak RSS.
    torch_peak = pd.to_numeric(frame["torch_peak_memory_bytes"], errors="coerce")
    if torch_peak.notna().all():
        return torch_peak / 2**30, "peak GPU memory, torch allocator (GiB)"
    return pd.to_numeric(frame["driver_peak_memory_bytes"], errors="coerce") / 2**30, "peak memory, process RSS (GiB)"


METRICS = {
    "peak_memory": ("Peak memory vs KV cache kept", _peak_memory_gib),
    "itl": (
        "Inter-token latency vs KV cache kept",
        lambda f: (f["itl_mean_s"] * 1e3, "inter-token latency, mean (ms)"),
    ),
    "energy_per_token": (
        "Energy per generated token vs KV cache kept",
        lambda f: (f["energy_per_token_j"], "energy per generated token (J)"),
    ),
}


def perf_vs_retention(summary: pd.DataFrame, metric: str, labels: dict[str, str] | None = None):
    """The figure for ``metric`` (peak_memory, itl or energy_per_token); ``labels`` names the custom presses."""
    with plt.rc_context(STYLE):  # the figures' font sizes: nothing under the layout rules' 8 pt
        return _perf_vs_retention(summary, metric, labeller(labels=labels))


def _perf_vs_retention(summary: pd.DataFrame, metric: str, label):
    backend, gpu = require_one_hardware(summary, f"the {metric} figure")
    title, values_of = METRICS[metric]
    frame = summary.copy()
    frame["value"], ylabel = values_of(frame)
    panels = sorted(frame.groupby(["model", "context_tokens"]).groups)
    n_cols = min(3, len(panels))
    n_rows = math.ceil(len(panels) / n_cols)
    figure, axes = plt.subplots(n_rows, n_cols, figsize=(5 * n_cols, 3.8 * n_rows), squeeze=False, layout="constrained")
    compressed = methods_in_order(frame["method"])  # custom presses too, after the catalogue's
    for index, (model, context) in enumerate(panels):
        ax = axes[index // n_cols][index % n_cols]
        panel = frame[(frame["model"] == model) & (frame["context_tokens"] == context) & (frame["batch_size"] == 1)]
        full = panel[panel["method"] == "full_cache"]
        if not full.empty:
            ax.axhline(
                full["value"].iloc[0],
                color=method_style("full_cache")["color"],
                linestyle="--",
                linewidth=1.2,
                label=label("full_cache"),
            )
        for method in compressed:
            line = panel[panel["method"] == method].sort_values("retention")
            if not line.empty:
                ax.plot(line["retention"] * 100, line["value"], label=label(method), **method_style(method))
        ax.set_xlabel("KV cache kept (% of prompt tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{model} · {int(context)} tokens")
        ax.set_xlim(0, 105)
        ax.grid(alpha=0.3)
        ax.legend()
    for index in range(len(panels), n_rows * n_cols):
        axes[index // n_cols][index % n_cols].set_visible(False)
    hardware = "FAKE hardware backend (CPU): plumbing only, not GPU costs" if backend == "fake" else gpu
    figure.suptitle(f"{title}\n{hardware}")
    return figure
