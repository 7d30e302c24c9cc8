"""What a changed question costs: each press's score with this question, none, or another."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from kvcache_bench.analysis.aggregate import (
    BASELINE_BATCH_SIZE,
    BASELINE_METHOD,
    question_change_cost,
    retention_percent,
)
from kvcache_bench.analysis.figures.cells import (
    MODE_WORDS,
    _constant,
    _constant_note,
    _group_label,
    _mode_label,
    _n_text,
    _one_decode_batch,
    _panel_rows,
    batch_one_cells,
    flagged_lines,
)
from kvcache_bench.analysis.figures.palette import FULL_CACHE_COLOUR, QUESTION_MODE_STYLES, method_style
from kvcache_bench.analysis.figures.panels import _draw_faint, _draw_line, _faint_handle, _fit, _retention_ticks
from kvcache_bench.analysis.figures.style import (
    STYLE,
    _canvas,
    _empty_figure,
    _legend,
    _legend_columns,
    _styled,
    _text_height,
)
from kvcache_bench.analysis.versus import STRONGEST, by_score, versus_methods


def _question_change_costs(per_example: pd.DataFrame, compared: list[str], seed: int, n_resamples: int) -> pd.DataFrame:
    """question_aware - each other mode, paired on the same examples, one table with a ``versus`` column."""
    tables = [
        question_change_cost(per_example, seed, n_resamples, against=mode).assign(versus=mode) for mode in compared
    ]
    tables = [t for t in tables if not t.empty]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


MODE_DODGE = 0.22  # rows of the dot plot between one method's question modes
ROW_INCHES = 0.3  # a method's row in the dot plot: readable at forty methods


@_styled
def question_change(
    summary: pd.DataFrame,
    per_example: pd.DataFrame,
    title: str | None = None,
    band_alpha: float = 0.15,
    seed: int = 0,
    n_resamples: int = 10_000,
    highlight=(),
    strongest: int = STRONGEST,
    labels: dict[str, str] | None = None,
):
    """What changing the question costs each method, at one retention or many.

    Per retention (a block), one row per method, sorted by its question-aware score: left, a dot per question
    mode with its 95% bootstrap interval (the full cache's question-aware score as a dashed line and band);
    right, the paired difference question-aware minus each other mode on the same examples, with its paired
    bootstrap interval. With several retentions a first block draws those differences against the cache kept,
    one line per method of the versus view (the others faint).
    """
    frame, label, modes, *_ = batch_one_cells(summary, labels)  # no cell left out: a flat block is judged per retention
    examples = _one_decode_batch(per_example[per_example["batch_size"] == BASELINE_BATCH_SIZE])
    compared = [m for m in modes if m != "question_aware"]
    costs = (
        _question_change_costs(examples, compared, seed, n_resamples)
        if "question_aware" in modes and compared
        else pd.DataFrame()
    )
    if costs.empty:
        return _empty_figure("No method ran question_aware and another question mode on the same examples.", title)
    compressed = frame[frame["method"] != BASELINE_METHOD]
    blocks, notes = [], []  # (group, retention or None for the lines over retention, height in inches)
    for group in sorted(costs.groupby(["dataset", "task", "model"]).groups):
        group_costs = _panel_rows(costs, *group)
        retentions = sorted(set(group_costs["retention"]), reverse=True)
        shown = []
        for retention in retentions:
            cells = _panel_rows(compressed, *group)
            cells = cells[(cells["retention"] == retention) & cells["method"].isin(set(group_costs["method"]))]
            if _constant(cells):  # every method, every mode, every example the same score: a sentence
                notes.append(_constant_note(cells, label, f"{retention_percent(retention)} kept, every question mode"))
            else:
                shown.append((group, retention, ROW_INCHES * cells["method"].nunique() + 1.5))
        if len(shown) > 1:
            blocks.append((group, None, 4.4))
        blocks += shown
    if not blocks:
        return _empty_figure("\n".join(notes), title)
    width = 12.5
    entries = [MODE_WORDS[m] for m in modes if m in QUESTION_MODE_STYLES] + [
        "full cache, question-aware (band: 95% interval)"
    ]
    legend_height = (
        _text_height(math.ceil(len(entries) / _legend_columns(entries, width)) + 2, STYLE["legend.fontsize"]) + 0.2
    )
    figure, content = _canvas(
        width,
        sum(height for *_, height in blocks) + legend_height + 0.4,
        title,
        notes=notes,
        flagged=flagged_lines(frame),
    )
    subfigures = content.subfigures(len(blocks), 1, height_ratios=[h for *_, h in blocks], squeeze=False)[:, 0]
    for (group, retention, _), sub in zip(blocks, subfigures):
        cells = _panel_rows(compressed, *group)
        group_costs = _panel_rows(costs, *group)
        full = _panel_rows(frame, *group, "question_aware")
        full = full[full["method"] == BASELINE_METHOD]
        if retention is None:
            _question_change_lines(sub, group_costs, compared, cells, label, highlight, strongest, band_alpha)
        else:
            _question_change_dots(
                sub,
                cells[cells["retention"] == retention],
                group_costs[group_costs["retention"] == retention],
                modes,
                compared,
                full,
                label,
                highlight,
            )
    handles = [Line2D([], [], linestyle="none", **QUESTION_MODE_STYLES[m]) for m in modes if m in QUESTION_MODE_STYLES]
    _legend(
        content,
        handles + [Line2D([], [], color=FULL_CACHE_COLOUR, linestyle="--")],
        entries,
        "Dots: score, 95% bootstrap interval. Right: question-aware minus that mode, paired, 95% interval",
        width,
    )
    return figure


def _question_change_dots(sub, cells, costs, modes, compared, full, label, highlight) -> None:
    """One retention: a row per method (best question-aware score on top), dots per mode, and the differences."""
    aware = cells[cells["question_mode"] == "question_aware"].set_index("method")["score"].to_dict()
    methods = by_score(set(costs["method"]), aware)
    rows = {m: len(methods) - 1 - i for i, m in enumerate(methods)}  # best at the top
    left, right = sub.subplots(1, 2, sharey=True, width_ratios=[3, 2])
    if not full.empty:
        base = full.iloc[0]
        left.axvline(base["score"], color=FULL_CACHE_COLOUR, linestyle="--", linewidth=1.2)
        left.axvspan(base["ci_low"], base["ci_high"], color=FULL_CACHE_COLOUR, alpha=0.08, linewidth=0)
    for k, mode in enumerate(modes):
        points = cells[(cells["question_mode"] == mode) & cells["method"].isin(rows)]
        y = np.array([rows[m] for m in points["method"]]) + (len(modes) - 1 - 2 * k) / 2 * MODE_DODGE
        left.errorbar(
            points["score"],
            y,
            xerr=[points["score"] - points["ci_low"], points["ci_high"] - points["score"]],
            linestyle="none",
            markersize=5,
            capsize=2,
            elinewidth=1.0,
            **QUESTION_MODE_STYLES[mode],
        )
    for k, mode in enumerate(compared):
        points = costs[(costs["versus"] == mode) & costs["method"].isin(rows)]
        y = np.array([rows[m] for m in points["method"]]) + (len(compared) - 1 - 2 * k) / 2 * MODE_DODGE
        right.errorbar(
            points["diff"],
            y,
            xerr=[points["diff"] - points["diff_ci_low"], points["diff_ci_high"] - points["diff"]],
            linestyle="none",
            markersize=5,
            capsize=2,
            elinewidth=1.0,
            **QUESTION_MODE_STYLES[mode],
        )
    right.axvline(0, color="#555555", linewidth=0.9)
    for ax in (left, right):
        for y in range(1, len(methods)):  # a rule between methods: each row's dots read as one method's
            ax.axhline(y - 0.5, color="#DDDDDD", linewidth=0.6, zorder=0)
        ax.grid(alpha=0.3, axis="x")
    left.set_yticks(list(rows.values()), [label(m) for m in rows])
    for tick, method in zip(left.get_yticklabels(), rows):
        if method in highlight:
            tick.set_fontweight("bold")
    left.set_ylim(-0.6, len(methods) - 0.4)
    left.set_xlim(*_fit(list(cells["ci_low"]) + list(cells["ci_high"]) + list(full["ci_low"]) + list(full["ci_high"])))
    right.set_xlim(*_fit(list(costs["diff_ci_low"]) + list(costs["diff_ci_high"]) + [0.0], floor=-102, ceiling=102))
    metric = cells["metric"].iloc[0] if not cells.empty else "score"
    left.set_xlabel(f"{metric} x100 in each question mode")
    right.set_xlabel("question-aware minus that mode (x100, paired)")
    dataset, task, model = cells[["dataset", "task", "model"]].iloc[0]
    retention = float(cells["retention"].iloc[0])
    sub.suptitle(
        f"{_group_label(dataset, task, model)} · {round(100 * retention, 6):g}% of the KV cache kept · "
        f"{_n_text(costs, 'n_paired').replace('n =', 'n paired =')}",
        fontsize=10,
    )


def _question_change_lines(sub, costs, compared, cells, label, highlight, strongest, band_alpha) -> None:
    """Several retentions: per compared mode, question-aware minus it against the cache kept, the versus view's
    methods in colour."""
    coloured, faint = versus_methods(cells, highlight, strongest)
    axes = sub.subplots(1, len(compared), sharey=True, squeeze=False)[0]
    low, high = _fit(list(costs["diff_ci_low"]) + list(costs["diff_ci_high"]) + [0.0], floor=-102, ceiling=102)
    for ax, mode in zip(axes, compared):
        rows = costs[costs["versus"] == mode]
        ax.axhline(0, color="#555555", linewidth=0.9)
        for method in faint:
            line = rows[rows["method"] == method].sort_values("retention")
            if not line.empty:
                _draw_faint(ax, line, "diff")
        for method in coloured:
            line = rows[rows["method"] == method].sort_values("retention")
            if not line.empty:
                bold = method in highlight
                _draw_line(
                    ax,
                    line,
                    "diff",
                    "diff_ci_low",
                    "diff_ci_high",
                    label(method),
                    method_style(method),
                    band_alpha,
                    linewidth=2.8 if bold else 1.6,
                    zorder=5 if bold else 3,
                )
        _retention_ticks(ax, costs["retention"], False)
        ax.set_ylim(low, high)
        ax.set_title(f"question-aware minus {_mode_label(mode)}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("paired difference (x100)")
    handles, texts = axes[0].get_legend_handles_labels()
    keep = [(h, t) for h, t in zip(handles, texts) if not t.startswith("_")]
    if faint:
        keep.append(_faint_handle(len(faint)))
    sub.legend(
        [h for h, _ in keep],
        [t for _, t in keep],
        loc="outside right upper",
        frameon=False,
        title="shading: 95% paired interval",
    )
    dataset, task, model = cells[["dataset", "task", "model"]].iloc[0]
    sub.suptitle(f"{_group_label(dataset, task, model)} · against the KV cache kept", fontsize=10)
