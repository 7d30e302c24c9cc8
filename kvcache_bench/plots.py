"""Figures from the summary table. Each figure is its own function, rule and file."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .io import atomic_path  # noqa: E402
from .methods import METHODS  # noqa: E402

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000", "#999999"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h"]


def method_label(name: str) -> str:
    return METHODS[name].label if name in METHODS else name


def save_figure(figure, png_path: str | Path, svg_path: str | Path | None = None) -> None:
    for path, fmt in ((png_path, "png"), (svg_path, "svg")):
        if path is None:
            continue
        with atomic_path(path) as tmp:
            figure.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight")
    plt.close(figure)


def quality_vs_retention(summary: pd.DataFrame, title: str | None = None):
    """Score against the fraction of the prompt cache kept; full cache drawn as a reference line."""
    frame = summary[(summary["batch_size"] == 1) & ~summary["incomplete"].astype(bool)]
    groups = sorted(frame.groupby(["dataset", "task", "model"]).groups)
    modes = sorted(frame["question_mode"].unique()) or ["question_aware"]
    n_rows, n_cols = max(1, len(groups)), max(1, len(modes))
    figure, axes = plt.subplots(n_rows, n_cols, figsize=(5.5 * n_cols, 4 * n_rows), squeeze=False)
    compressed = [m for m in METHODS if m != "full_cache" and m in set(frame["method"])]
    for r, (dataset, task, model) in enumerate(groups or [("", "", "")]):
        for c, mode in enumerate(modes):
            ax = axes[r][c]
            panel = frame[(frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model) & (frame["question_mode"] == mode)]
            full = frame[(frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model) & (frame["method"] == "full_cache")]
            if not full.empty:
                ax.axhline(full["score"].iloc[0], color="black", linestyle="--", linewidth=1.2, label=method_label("full_cache"))
            for i, method in enumerate(compressed):
                line = panel[panel["method"] == method].sort_values("retention")
                if line.empty:
                    continue
                ax.plot(
                    line["retention"] * 100, line["score"], marker=MARKERS[i % len(MARKERS)],
                    color=OKABE_ITO[i % len(OKABE_ITO)], label=method_label(method),
                )
            metric = panel["metric"].iloc[0] if not panel.empty else "score"
            ax.set_xlabel("KV cache kept (% of prompt tokens)")
            ax.set_ylabel(f"{task} {metric} (x100)")
            ax.set_title(f"{model} · {dataset}/{task} · {mode.replace('_', '-')}", fontsize=9)
            ax.grid(alpha=0.3)
            ax.set_xlim(0, 105)
            ax.legend(fontsize=7, loc="lower right")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure
