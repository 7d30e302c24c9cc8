"""Answer quality against the share of the KV cache kept: the versus view, one panel per task and question mode."""

from __future__ import annotations

import math

import pandas as pd

from kvcache_bench.analysis.aggregate import BASELINE_METHOD
from kvcache_bench.analysis.figures.cells import (
    GROUP_COLUMNS,
    NO_BATCH_ONE_CELLS,
    _drawn_retentions,
    _mode_label,
    _n_text,
    _panel_rows,
    batch_one_cells,
    flagged_lines,
)
from kvcache_bench.analysis.figures.palette import method_style
from kvcache_bench.analysis.figures.panels import (
    _draw_faint,
    _draw_line,
    _faint_handle,
    _fit,
    _full_cache_reference,
    _retention_ticks,
    point_offsets,
)
from kvcache_bench.analysis.figures.style import (
    CHAR_EM,
    FIGURE_WIDTH_MAX,
    STYLE,
    _canvas,
    _empty_figure,
    _legend,
    _legend_columns,
    _styled,
    _text_height,
)
from kvcache_bench.analysis.versus import STRONGEST, versus_methods


@_styled
def quality_vs_retention(
    summary: pd.DataFrame,
    title: str | None = None,
    band_alpha: float = 0.15,
    highlight=(),
    strongest: int = STRONGEST,
    labels: dict[str, str] | None = None,
):
    """Score against the share of the prompt's KV cache kept: a row per dataset/task/model, a panel per question
    mode (aware, agnostic, other, same: the order a reader compares them in), all on the same axes.

    Each method in colour is a line with its 95% bootstrap band (a point with whiskers where it was measured at
    one retention); the full cache (batch 1) is a dashed black line with its band. In colour: the versus view
    (``analysis.versus``); the other methods are faint grey lines behind them.
    """
    # a row of panels with no variation is a sentence instead
    frame, label, modes, groups, notes = batch_one_cells(summary, labels, constant_by=GROUP_COLUMNS)
    if frame.empty:  # no cell at batch 1, or every row a sentence
        return _empty_figure("\n".join(notes) or NO_BATCH_ONE_CELLS, title)
    coloured, faint = versus_methods(frame, highlight, strongest)
    emphasised = set(highlight) - {BASELINE_METHOD}
    full_label = f"{label(BASELINE_METHOD)} (100% kept, batch 1)"
    entries = [full_label] + [label(m) for m in coloured] + ([_faint_handle(len(faint))[1]] if faint else [])
    beside = len(modes) <= 2  # a legend beside one or two panels, under three or four
    entry_inches = (max(len(text) for text in entries) * CHAR_EM * STYLE["legend.fontsize"] + 40) / 72
    width = min(5.0 * len(modes) + (entry_inches + 0.3 if beside else 0), FIGURE_WIDTH_MAX)
    columns = 1 if beside else _legend_columns(entries, width)
    legend_height = 0 if beside else _text_height(math.ceil(len(entries) / columns) + 2, STYLE["legend.fontsize"]) + 0.2
    height = max(3.9 * len(groups) + 0.5 + legend_height, _text_height(len(entries) + 3) + 0.8 if beside else 0)
    figure, content = _canvas(max(width, 6.5), height, title, notes=notes, flagged=flagged_lines(frame))
    axes = content.subplots(len(groups), len(modes), squeeze=False, sharey="row")
    handles: dict[str, object] = {}
    for r, (dataset, task, model) in enumerate(groups):
        rows = _panel_rows(frame, dataset, task, model)
        low, high = _fit(list(rows["ci_low"]) + list(rows["ci_high"]))
        for c, mode in enumerate(modes):
            ax, panel = axes[r][c], _panel_rows(frame, dataset, task, model, mode)
            _full_cache_reference(ax, panel, full_label)
            lines = {m: panel[panel["method"] == m].sort_values("retention") for m in coloured + faint}
            lines = {m: line for m, line in lines.items() if not line.empty}
            offsets = point_offsets(lines)
            for method in faint:
                if method in lines:
                    _draw_faint(ax, lines[method], "score", offsets.get(method, 0.0))
            for method in coloured:
                if method in lines:
                    bold = method in emphasised
                    _draw_line(
                        ax,
                        lines[method],
                        "score",
                        "ci_low",
                        "ci_high",
                        label(method),
                        method_style(method),
                        band_alpha,
                        offsets.get(method, 0.0),
                        linewidth=2.8 if bold else 1.6,
                        zorder=5 if bold else 3,
                    )
            for handle, text in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(text, handle)
            _retention_ticks(ax, _drawn_retentions(rows), any(offsets.values()))
            ax.set_ylim(low, high)
            ax.set_title(
                f"{_mode_label(mode)} · {_n_text(panel)}" if not panel.empty else f"{_mode_label(mode)}: not run"
            )
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel(f"{model}\n{dataset}/{task}\n{rows['metric'].iloc[0]} x100 (higher is better)")
    legend = [(handles[t], t) for t in entries if t in handles]
    if faint:
        legend.append(_faint_handle(len(faint)))
    legend_title = (
        f"In order of mean score ({_mode_label(modes[0])});\nshading or whiskers: 95% bootstrap interval"
        if beside
        else f"In order of mean score ({_mode_label(modes[0])}); shading or whiskers: 95% bootstrap interval"
    )
    _legend(
        content,
        [h for h, _ in legend],
        [t for _, t in legend],
        legend_title,
        width,
        loc="outside right upper" if beside else "outside lower center",
        columns=columns,
    )
    return figure
