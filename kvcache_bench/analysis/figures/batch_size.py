"""Full cache at each batch size: does batching change the answers?"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kvcache_bench.analysis.aggregate import BASELINE_METHOD
from kvcache_bench.analysis.figures.cells import _complete, _group_label, _mode_label, flagged_lines, setting_label
from kvcache_bench.analysis.figures.palette import FULL_CACHE_COLOUR
from kvcache_bench.analysis.figures.style import _canvas, _empty_figure, _styled
from kvcache_bench.analysis.versus import modes_in_order


def _no_change(panel: pd.DataFrame) -> bool:
    """Every setting compared with the reference scored the same on every example (Δ and its interval 0)."""
    compared = panel[panel["diff_vs_full"].notna()]
    return not compared.empty and bool(
        ((compared[["diff_vs_full", "diff_ci_low", "diff_ci_high"]] == 0).all(axis=1)).all()
    )


@_styled
def batch_size_sensitivity(summary: pd.DataFrame, title: str | None = None):
    """Full cache at each batch size, with 95% CIs and the paired difference to batch 1 printed.

    A batch size only changes padding for the full cache, so the scores should agree within noise;
    eviction methods at batch > 1 are refused by the config check and never appear here. A panel in which
    every batch size gave the same score on every example is a sentence under the figure instead.
    """
    frame = _complete(summary[summary["method"] == BASELINE_METHOD])
    if frame.empty or len(frame.groupby(["batch_size", "decode_batch_size"])) < 2:
        return _empty_figure(
            "Only one batch size was run for the full cache: nothing to compare. "
            "Set batch_size_overrides: {full_cache: [1, 4]} in the config.",
            title,
        )
    modes = modes_in_order(frame["question_mode"])
    groups = sorted(
        frame.groupby(["dataset", "task", "model", "question_mode"]).groups, key=lambda g: (g[:3], modes.index(g[3]))
    )
    panels, unchanged = [], {}
    for dataset, task, model, mode in groups:
        panel = frame[
            (frame["dataset"] == dataset)
            & (frame["task"] == task)
            & (frame["model"] == model)
            & (frame["question_mode"] == mode)
        ].sort_values(["batch_size", "decode_batch_size"])
        if _no_change(panel):
            settings = [
                setting_label(b, d).replace("\n", " · ")
                for b, d in zip(panel["batch_size"], panel["decode_batch_size"])
            ]
            unchanged.setdefault((dataset, task, model, tuple(settings)), []).append(mode)
        else:
            panels.append(((dataset, task, model, mode), panel))
    notes = [
        f"{_group_label(dataset, task, model)}: {' and '.join(settings)} gave the full cache the same score on every "
        f"example in {', '.join(_mode_label(m) for m in modes)} "
        "(paired difference 0, interval [0, 0]): no panel is drawn."
        for (dataset, task, model, settings), modes in unchanged.items()
    ]
    if not panels:
        return _empty_figure("\n".join(notes), title)
    n_cols = min(4, len(panels))
    n_rows = math.ceil(len(panels) / n_cols)
    figure, content = _canvas(
        max(6.5, 3.8 * n_cols), 3.8 * n_rows + 0.5, title, notes=notes, flagged=flagged_lines(frame)
    )
    axes = content.subplots(n_rows, n_cols, squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, ((dataset, task, model, mode), panel) in zip(axes.flat, panels):
        positions = np.arange(len(panel))
        labels = [setting_label(b, d) for b, d in zip(panel["batch_size"], panel["decode_batch_size"])]
        reference = labels[int(np.argmax(panel["diff_vs_full"].isna().to_numpy()))].replace("\n", " · ")
        errors = np.vstack([panel["score"] - panel["ci_low"], panel["ci_high"] - panel["score"]])
        ax.errorbar(positions, panel["score"], yerr=errors, fmt="o", color=FULL_CACHE_COLOUR, capsize=5)
        for x, row in zip(positions, panel.itertuples()):
            text = f"n = {row.n}"
            if not pd.isna(row.diff_vs_full):
                text += f"\nΔ {row.diff_vs_full:+.2f}\n[{row.diff_ci_low:+.2f}, {row.diff_ci_high:+.2f}]"
            ax.annotate(text, (x, row.ci_high), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
        ax.set_xticks(positions, labels)
        ax.set_xlim(-0.6, len(panel) - 0.4)
        ax.set_xlabel(f"prompts per batch (left-padded)\nΔ: paired difference to {reference}")
        ax.set_ylabel(f"full cache: {panel['metric'].iloc[0]} x100 (mean, 95% CI)")
        low, high = panel["ci_low"].min(), panel["ci_high"].max()
        span = max(high - low, 1.0)
        ax.set_ylim(max(low - 0.2 * span, -2), high + 0.9 * span)  # room above the whiskers for the annotations
        ax.set_title(f"{model} · {dataset}/{task}\n{_mode_label(mode)}")
        ax.grid(alpha=0.3, axis="y")
    return figure
