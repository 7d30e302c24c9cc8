"""Figures from the study's tables. Each figure is its own function, rule, script and file.

Every method keeps one colour and marker in every figure (Okabe-Ito palette: distinguishable with the
common colour-vision deficiencies, and markers so the lines survive greyscale). Full cache is black.
Incomplete cells (fewer examples than asked for) are never drawn.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kvcache_bench.analysis.aggregate import BASELINE_BATCH_SIZE, BASELINE_METHOD, question_change_cost  # noqa: E402
from kvcache_bench.analysis.measured import flagged_caption  # noqa: E402
from kvcache_bench.io import atomic_path  # noqa: E402
from kvcache_bench.methods.registry import METHODS, method_label  # noqa: E402

# Okabe & Ito (2008), without black, which is kept for the full cache.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"]
# Past Okabe-Ito's eight: Paul Tol's wine and indigo, also distinguishable with colour-vision deficiencies.
METHOD_COLOURS = OKABE_ITO + ["#882255", "#332288"]
FULL_CACHE_COLOUR = "#000000"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "*", "p"]
RETENTION_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
COMPRESSED_METHODS = [name for name in METHODS if name != BASELINE_METHOD]


def method_style(name: str) -> dict:
    """The same colour and marker for a method in every figure, whatever else the study contains.

    Ten colours cannot tell sixty methods apart: each method's (colour, marker) pair is its own instead.
    """
    if name == BASELINE_METHOD:
        return {"color": FULL_CACHE_COLOUR, "marker": None}
    index = COMPRESSED_METHODS.index(name) if name in COMPRESSED_METHODS else len(COMPRESSED_METHODS)
    marker = MARKERS[(index // len(METHOD_COLOURS)) % len(MARKERS)]
    return {"color": METHOD_COLOURS[index % len(METHOD_COLOURS)], "marker": marker}


def _one_decode_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of the smallest decode batch size present: decode batching must not change answers, so one
    setting speaks for all (and a study that also ran others gets one line per method, not several)."""
    if frame.empty:
        return frame
    return frame[frame["decode_batch_size"] == frame["decode_batch_size"].min()]


def setting_label(batch_size: int, decode_batch_size: int) -> str:
    """A full-cache setting as the batch-size figure names it: prefill batch, and decode batch when above 1."""
    return f"batch {batch_size}" + (f"\ndecode {decode_batch_size}" if decode_batch_size > 1 else "")


def save_figure(figure, png_path: str | Path, svg_path: str | Path | None = None) -> None:
    for path, fmt in ((png_path, "png"), (svg_path, "svg")):
        if path is None:
            continue
        with atomic_path(path) as tmp:
            # no timestamp in the SVG: an unchanged figure is an unchanged file
            metadata = {"Date": None} if fmt == "svg" else None
            figure.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight", metadata=metadata)
    plt.close(figure)


def _complete(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[~frame["incomplete"].astype(bool)] if "incomplete" in frame else frame


def _mode_label(mode: str) -> str:
    return mode.replace("_", "-")


def _metric_axis_label(task: str, metric: str) -> str:
    return f"{task}: {metric} (x100, higher is better)"


def _empty_figure(message: str, title: str | None):
    figure, ax = plt.subplots(figsize=(6, 3))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    if title:
        figure.suptitle(title)
    return figure


def quality_vs_retention(summary: pd.DataFrame, title: str | None = None, band_alpha: float = 0.15):
    """Score against the share of the prompt's KV cache kept, one panel per question mode.

    Each method is a line with its 95% bootstrap band; full cache (batch 1) is a horizontal black
    line with its own band, because it keeps 100% and is what every method is compared with.
    """
    frame = _complete(_one_decode_batch(summary[summary["batch_size"] == BASELINE_BATCH_SIZE]))
    if frame.empty:
        return _empty_figure("No complete batch-1 cells to plot.", title)
    groups = sorted(frame.groupby(["dataset", "task", "model"]).groups)
    modes = sorted(frame["question_mode"].unique())
    figure, axes = plt.subplots(
        len(groups), len(modes), figsize=(5.8 * len(modes), 4.4 * len(groups)), squeeze=False, sharey="row"
    )
    for r, (dataset, task, model) in enumerate(groups):
        for c, mode in enumerate(modes):
            ax = axes[r][c]
            panel = frame[
                (frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
                & (frame["question_mode"] == mode)
            ]
            full = panel[panel["method"] == BASELINE_METHOD]
            if not full.empty:
                base = full.iloc[0]
                ax.axhline(base["score"], color=FULL_CACHE_COLOUR, linestyle="--", linewidth=1.4,
                           label=f"{method_label(BASELINE_METHOD)} (100% kept)")
                ax.axhspan(base["ci_low"], base["ci_high"], color=FULL_CACHE_COLOUR, alpha=0.08, linewidth=0)
            for method in [m for m in COMPRESSED_METHODS if m in set(panel["method"])] + sorted(
                set(panel["method"]) - set(METHODS)
            ):
                line = panel[panel["method"] == method].sort_values("retention")
                style = method_style(method)
                x = line["retention"] * 100
                ax.plot(x, line["score"], label=method_label(method), linewidth=1.6, markersize=5, **style)
                ax.fill_between(x, line["ci_low"], line["ci_high"], color=style["color"], alpha=band_alpha, linewidth=0)
            metric = panel["metric"].iloc[0] if not panel.empty else "score"
            n_values = sorted(set(panel["n"]))
            n_text = f"n = {n_values[0]}" if len(n_values) == 1 else f"n = {n_values[0]}-{n_values[-1]}"
            ax.set_title(f"{model} · {dataset}/{task} · {_mode_label(mode)} · {n_text}", fontsize=9)
            ax.set_xlabel("KV cache kept (% of prompt tokens)")
            ax.set_ylabel(_metric_axis_label(task, metric))
            ax.set_xlim(0, 105)
            ax.set_ylim(-2, 102)  # the metric's whole range: a gap is shown at its true size
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="best", title="shaded: 95% bootstrap CI", title_fontsize=7)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return with_flagged_caption(figure, frame)


def with_flagged_caption(figure, summary: pd.DataFrame):
    """The cells the figure draws that were measured other than they asked, named under it."""
    caption = flagged_caption(summary)
    if caption:
        lines = caption.count("\n") + 1
        figure.subplots_adjust(bottom=min(0.5, 0.06 + 0.035 * lines))
        figure.text(0.01, 0.005, caption, fontsize=7, ha="left", va="bottom", color="firebrick")
    return figure


def paired_scatter(per_example: pd.DataFrame, title: str | None = None, point_alpha: float = 0.5,
                   max_columns: int = 4):
    """Each example's score with a method (y) against its score with full cache (x), same example.

    Points above the diagonal are examples the method answered better than the full cache. The
    counts of better/worse/tied examples are printed in each panel: ties are common (0 or 1 scores),
    so points that overlap are still counted.
    """
    frame = _one_decode_batch(per_example[per_example["batch_size"] == BASELINE_BATCH_SIZE])
    keys = ["dataset", "task", "model", "question_mode", "id"]
    baseline = frame[frame["method"] == BASELINE_METHOD][keys + ["score"]].rename(columns={"score": "full_score"})
    paired = frame[frame["method"] != BASELINE_METHOD].merge(baseline, on=keys, how="inner")
    if paired.empty:
        return _empty_figure("No examples scored with both a method and the full cache.", title)
    rows = sorted(paired.groupby(["dataset", "task", "model", "question_mode"]).groups)
    methods = [m for m in COMPRESSED_METHODS if m in set(paired["method"])] + sorted(set(paired["method"]) - set(METHODS))
    retentions = sorted(paired["retention"].unique(), reverse=True)
    n_cols = min(len(methods), max_columns)
    rows_per_group = -(-len(methods) // n_cols)
    n_rows = len(rows) * rows_per_group
    figure, axes = plt.subplots(n_rows, n_cols, figsize=(3.2 * n_cols, 3.8 * n_rows),
                                squeeze=False, sharex=True, sharey=True)
    for ax in axes.flat[len(rows) * len(methods):]:
        ax.set_visible(False)
    for g, (dataset, task, model, mode) in enumerate(rows):
        for k, method in enumerate(methods):
            r, c = g * rows_per_group + k // n_cols, k % n_cols
            ax = axes[r][c]
            cell = paired[(paired["dataset"] == dataset) & (paired["task"] == task) & (paired["model"] == model)
                          & (paired["question_mode"] == mode) & (paired["method"] == method)]
            ax.plot([0, 100], [0, 100], color="#777777", linewidth=0.8, linestyle=":")
            for j, retention in enumerate(retentions):
                points = cell[cell["retention"] == retention]
                if points.empty:
                    continue
                ax.scatter(points["full_score"] * 100, points["score"] * 100, s=16, alpha=point_alpha,
                           color=RETENTION_COLOURS[j % len(RETENTION_COLOURS)], marker=MARKERS[j % len(MARKERS)],
                           label=f"{retention:.0%} kept", edgecolors="none")
            better = int((cell["score"] > cell["full_score"]).sum())
            worse = int((cell["score"] < cell["full_score"]).sum())
            tied = len(cell) - better - worse
            ax.text(0.03, 0.97, f"better {better} · worse {worse} · tied {tied}\n(examples x retentions)", transform=ax.transAxes,
                    va="top", fontsize=7)
            metric = cell["metric"].iloc[0] if not cell.empty else "score"
            ax.set_title(f"{method_label(method)} · {_mode_label(mode)}", fontsize=9)
            if k + n_cols >= len(methods):  # bottom row of this group's panels
                ax.set_xlabel(f"Full cache: {metric} (x100)")
            if c == 0:
                ax.set_ylabel(f"{task} · method: {metric} (x100)")
            ax.set_xlim(-5, 105)
            ax.set_ylim(-5, 105)
            ax.set_aspect("equal")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="lower right")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def batch_size_sensitivity(summary: pd.DataFrame, title: str | None = None):
    """Full cache at each batch size, with 95% CIs and the paired difference to batch 1 printed.

    A batch size only changes padding for the full cache, so the scores should agree within noise;
    eviction methods at batch > 1 are refused by the config check and never appear here.
    """
    frame = _complete(summary[summary["method"] == BASELINE_METHOD])
    if frame.empty or len(frame.groupby(["batch_size", "decode_batch_size"])) < 2:
        return _empty_figure(
            "Only one batch size was run for the full cache: nothing to compare.\n"
            "Set batch_size_overrides: {full_cache: [1, 4]} in the config.", title)
    groups = sorted(frame.groupby(["dataset", "task", "model", "question_mode"]).groups)
    figure, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.8), squeeze=False)
    for c, (dataset, task, model, mode) in enumerate(groups):
        ax = axes[0][c]
        panel = frame[(frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
                      & (frame["question_mode"] == mode)].sort_values(["batch_size", "decode_batch_size"])
        positions = np.arange(len(panel))
        labels = [setting_label(b, d) for b, d in zip(panel["batch_size"], panel["decode_batch_size"])]
        reference = labels[int(np.argmax(panel["diff_vs_full"].isna().to_numpy()))].replace("\n", " · ")
        errors = np.vstack([panel["score"] - panel["ci_low"], panel["ci_high"] - panel["score"]])
        ax.errorbar(positions, panel["score"], yerr=errors, fmt="o", color=FULL_CACHE_COLOUR, capsize=5,
                    label=f"{method_label(BASELINE_METHOD)} (mean, 95% CI)")
        for x, row in zip(positions, panel.itertuples()):
            text = f"n = {row.n}"
            if not pd.isna(row.diff_vs_full):
                text += f"\nΔ vs {reference}: {row.diff_vs_full:+.2f}\n[{row.diff_ci_low:+.2f}, {row.diff_ci_high:+.2f}]"
            ax.annotate(text, (x, row.ci_high), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xticks(positions, labels)
        ax.set_xlim(-0.6, len(panel) - 0.4)
        ax.set_xlabel("Prompts per batch (left-padded)")
        ax.set_ylabel(_metric_axis_label(task, panel["metric"].iloc[0]))
        low, high = panel["ci_low"].min(), panel["ci_high"].max()
        span = max(high - low, 1.0)
        ax.set_ylim(max(low - 0.2 * span, -2), high + 0.6 * span)
        ax.set_title(f"{model} · {dataset}/{task} · {_mode_label(mode)}", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, loc="lower right")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return with_flagged_caption(figure, frame)


QUESTION_MODE_STYLES = {
    "question_aware": {"color": "#0072B2", "marker": "o"},
    "question_agnostic": {"color": "#999999", "marker": "s"},
    "other_question": {"color": "#D55E00", "marker": "^"},
    "same_question": {"color": "#009E73", "marker": "D"},
}


def question_change(summary: pd.DataFrame, per_example: pd.DataFrame, title: str | None = None, band_alpha: float = 0.15,
                    seed: int = 0, n_resamples: int = 10_000):
    """Per method: its score in each question mode at each retention (top), and the paired difference
    question_aware - other_question with its 95% bootstrap interval (bottom): how much of the method's score
    was chosen for the question it was shown."""
    frame = _complete(_one_decode_batch(summary[(summary["batch_size"] == BASELINE_BATCH_SIZE) & (summary["method"] != BASELINE_METHOD)]))
    costs = question_change_cost(_one_decode_batch(per_example[per_example["batch_size"] == BASELINE_BATCH_SIZE]), seed, n_resamples)
    if frame.empty or costs.empty:
        return _empty_figure("No method ran both question_aware and other_question.", title)
    groups = sorted(costs.groupby(["dataset", "task", "model"]).groups)
    methods = [m for m in COMPRESSED_METHODS if m in set(costs["method"])] + sorted(set(costs["method"]) - set(METHODS))
    figure, axes = plt.subplots(2 * len(groups), len(methods), figsize=(3.4 * len(methods), 6.0 * len(groups)),
                                squeeze=False, sharex=True, gridspec_kw={"height_ratios": [3, 2] * len(groups)})
    for g, (dataset, task, model) in enumerate(groups):
        in_group = (frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
        for c, method in enumerate(methods):
            top, bottom = axes[2 * g][c], axes[2 * g + 1][c]
            for mode, style in QUESTION_MODE_STYLES.items():
                line = frame[in_group & (frame["method"] == method) & (frame["question_mode"] == mode)].sort_values("retention")
                if line.empty:
                    continue
                x = line["retention"] * 100
                top.plot(x, line["score"], label=f"{_mode_label(mode)} (n {line['n'].min()})", linewidth=1.4, markersize=4, **style)
                top.fill_between(x, line["ci_low"], line["ci_high"], color=style["color"], alpha=band_alpha, linewidth=0)
            cost = costs[(costs["dataset"] == dataset) & (costs["task"] == task) & (costs["model"] == model) & (costs["method"] == method)]
            cost = cost.sort_values("retention")
            bottom.axhline(0, color="#777777", linewidth=0.8)
            bottom.errorbar(cost["retention"] * 100, cost["diff"], yerr=[cost["diff"] - cost["diff_ci_low"], cost["diff_ci_high"] - cost["diff"]],
                            fmt="o-", color=method_style(method)["color"], capsize=3, markersize=4)
            top.set_title(f"{method_label(method)} · {task}", fontsize=9)
            top.set_ylim(-2, 102)
            top.grid(alpha=0.3)
            top.legend(fontsize=6, loc="lower right")
            bottom.grid(alpha=0.3)
            bottom.set_xlabel("KV cache kept (% of prompt tokens)")
            if c == 0:
                top.set_ylabel(f"{model}: score (x100)")
                bottom.set_ylabel("aware - other (x100)\npaired, 95% CI")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return with_flagged_caption(figure, frame)
