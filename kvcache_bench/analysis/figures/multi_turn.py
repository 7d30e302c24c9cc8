"""Score against turn in the multi-turn mode: presses as lines, the full cache at each turn as the reference."""

from __future__ import annotations

import math

import pandas as pd

from kvcache_bench.analysis.aggregate import BASELINE_METHOD, retention_percent
from kvcache_bench.analysis.figures.cells import GROUP_COLUMNS, _group_label, _n_text, _panel_rows
from kvcache_bench.analysis.figures.palette import FAINT_COLOUR, FULL_CACHE_COLOUR, method_style
from kvcache_bench.analysis.figures.panels import _faint_handle, _fit
from kvcache_bench.analysis.figures.style import (
    FIGURE_WIDTH_MAX,
    STYLE,
    _canvas,
    _empty_figure,
    _legend,
    _legend_columns,
    _styled,
    _text_height,
)
from kvcache_bench.analysis.multi_turn import figure_rows
from kvcache_bench.analysis.versus import STRONGEST, labeller, versus_methods

NO_MULTI_TURN_CELLS = "No complete batch-1 multi-turn cell to draw (results/tables/summary.md lists why)."


def _faint_turn_line(ax, line: pd.DataFrame) -> None:
    """A press outside the versus view: behind the others, grey, no band (ranking.md names it)."""
    ax.plot(line["turn"], line["score"], color=FAINT_COLOUR, linewidth=0.9, marker=".", alpha=0.8, zorder=1)


def _turn_line(ax, line: pd.DataFrame, label: str, style: dict, band_alpha: float, **line_style) -> None:
    """A cell's score at each turn with its 95% interval as a band (a point with whiskers when it has one turn)."""
    if len(line) == 1:
        ax.errorbar(
            line["turn"],
            line["score"],
            yerr=[line["score"] - line["ci_low"], line["ci_high"] - line["score"]],
            label=label,
            capsize=2.5,
            markersize=5,
            **{**style, **line_style},
        )
        return
    ax.plot(line["turn"], line["score"], label=label, markersize=5, **{**style, **line_style})
    ax.fill_between(line["turn"], line["ci_low"], line["ci_high"], color=style["color"], alpha=band_alpha, linewidth=0)


@_styled
def score_by_turn(
    by_turn: pd.DataFrame,
    summary: pd.DataFrame,
    title: str | None = None,
    band_alpha: float = 0.15,
    highlight=(),
    strongest: int = STRONGEST,
    labels: dict[str, str] | None = None,
):
    """Score against the turn of the conversation (analysis.multi_turn's table): a row of panels per
    dataset/task/model, a panel per share of the KV cache kept, on the same axes.

    In each panel the full cache (batch 1) is a dashed black line through its score at each turn, with its band:
    the conversation's own difficulty at that turn, which a press is read against. Each press in colour (the versus
    view, ``analysis.versus``) is a line with its 95% bootstrap band; the others are faint behind them. Cells the
    summary flags incomplete are left out, as in every figure.
    """
    rows = figure_rows(by_turn, summary)
    if rows.empty:
        return _empty_figure(NO_MULTI_TURN_CELLS, title)
    label = labeller(summary, labels)
    groups = sorted(rows.groupby(list(GROUP_COLUMNS)).groups)
    compressed = rows[rows["method"] != BASELINE_METHOD]
    retentions = sorted(set(compressed["retention"]), reverse=True) or sorted(set(rows["retention"]))
    coloured, faint = versus_methods(rows, highlight, strongest)
    emphasised = set(highlight) - {BASELINE_METHOD}
    full_label = f"{label(BASELINE_METHOD)} (100% kept, batch 1) at each turn"
    entries = [full_label] + [label(m) for m in coloured] + ([_faint_handle(len(faint))[1]] if faint else [])
    # the legend under the panels: beside one panel, the figure's title ran into the legend's (layout rules)
    width = max(min(4.6 * len(retentions), FIGURE_WIDTH_MAX), 6.5)
    columns = _legend_columns(entries, width)
    legend_height = _text_height(math.ceil(len(entries) / columns) + 2, STYLE["legend.fontsize"]) + 0.2
    figure, content = _canvas(width, 3.9 * len(groups) + 0.5 + legend_height, title)
    axes = content.subplots(len(groups), len(retentions), squeeze=False, sharey="row")
    handles: dict[str, object] = {}
    for r, (dataset, task, model) in enumerate(groups):
        group = _panel_rows(rows, dataset, task, model)
        low, high = _fit(list(group["ci_low"]) + list(group["ci_high"]))
        full = group[group["method"] == BASELINE_METHOD].sort_values("turn")
        for c, retention in enumerate(retentions):
            ax, panel = axes[r][c], group[group["retention"] == retention]
            if not full.empty:
                _turn_line(ax, full, full_label, {"color": FULL_CACHE_COLOUR}, 0.08, linestyle="--", linewidth=1.4)
            for method in faint:
                line = panel[panel["method"] == method].sort_values("turn")
                if not line.empty:
                    _faint_turn_line(ax, line)
            for method in coloured:
                line = panel[panel["method"] == method].sort_values("turn")
                if not line.empty:
                    bold = method in emphasised
                    _turn_line(
                        ax,
                        line,
                        label(method),
                        method_style(method),
                        band_alpha,
                        linewidth=2.8 if bold else 1.6,
                        zorder=5 if bold else 3,
                    )
            for handle, text in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(text, handle)
            turns = sorted(set(group["turn"]))
            ax.set_xticks(turns, [str(t) for t in turns])
            ax.set_xlim(turns[0] - 0.3, turns[-1] + 0.3)
            ax.set_xlabel("turn of the conversation")
            ax.set_ylim(low, high)
            drawn = panel[panel["method"] != BASELINE_METHOD]
            ax.set_title(
                f"{retention_percent(retention)} of the KV cache kept · {_n_text(drawn)} per turn"
                if not drawn.empty
                else f"{retention_percent(retention)} kept: no press"
            )
            ax.grid(alpha=0.3)
            if c == 0:
                metric = group["metric"].iloc[0]
                ax.set_ylabel(f"{_group_label(dataset, task, model)}\n{metric} x100 (higher is better)")
    legend = [(handles[t], t) for t in entries if t in handles]
    if faint:
        legend.append(_faint_handle(len(faint)))
    _legend(
        content,
        [h for h, _ in legend],
        [t for _, t in legend],
        "Multi-turn, in order of mean score; shading or whiskers: 95% bootstrap interval",
        width,
        columns=columns,
    )
    return figure
