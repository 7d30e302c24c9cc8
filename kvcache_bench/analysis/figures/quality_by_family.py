"""The appendix of a study of more than eight methods: every method in colour, one panel per method family."""

from __future__ import annotations

import math

import pandas as pd

from kvcache_bench.analysis.aggregate import BASELINE_METHOD
from kvcache_bench.analysis.figures.cells import (
    GROUP_COLUMNS,
    NO_BATCH_ONE_CELLS,
    _drawn_retentions,
    _group_label,
    _mode_label,
    _n_text,
    _panel_rows,
    batch_one_cells,
    flagged_lines,
)
from kvcache_bench.analysis.figures.palette import families_of, method_style, methods_in_order
from kvcache_bench.analysis.figures.panels import (
    _draw_line,
    _fit,
    _full_cache_reference,
    _retention_ticks,
    point_offsets,
)
from kvcache_bench.analysis.figures.style import (
    PANEL_COLUMNS,
    STYLE,
    _canvas,
    _empty_figure,
    _row_major,
    _styled,
    _text_height,
    _wrap,
)
from kvcache_bench.analysis.versus import by_score, mean_scores


@_styled
def quality_by_family(
    summary: pd.DataFrame,
    title: str | None = None,
    band_alpha: float = 0.15,
    highlight=(),
    labels: dict[str, str] | None = None,
):
    """The appendix: every method in colour, one panel per method family (never split), each with the full
    cache and the highlighted methods, a block of panels per dataset/task/model and question mode."""
    # a block of panels with no variation is a sentence instead
    frame, label, modes, groups, flat = batch_one_cells(summary, labels, constant_by=(*GROUP_COLUMNS, "question_mode"))
    if frame.empty:  # no cell at batch 1, or every block a sentence
        return _empty_figure("\n".join(flat) or NO_BATCH_ONE_CELLS, title)
    notes = ["Shading or whiskers: 95% bootstrap interval; each legend in order of mean score."] + flat
    blocks = [(group, mode) for group in groups for mode in modes]
    highlighted = [m for m in highlight if m != BASELINE_METHOD and m in set(frame["method"])]
    contents = {}
    for block in blocks:
        rows = _panel_rows(frame, *block[0], block[1])
        scores = mean_scores(rows)
        families = families_of(methods_in_order(rows["method"]))
        contents[block] = [
            (family, by_score(members, scores)) for family, members in families if set(members) - set(highlighted)
        ]
    blocks = [block for block in blocks if contents[block]]
    n_cols = min(PANEL_COLUMNS, max(len(panels) for panels in contents.values()))

    def panel_height(members: list[str]) -> float:  # the panel, and its legend under it in two columns
        return 3.2 + _text_height(math.ceil((len(members) + 1 + len(highlighted)) / 2) + 0.5, STYLE["legend.fontsize"])

    heights = []
    for block in blocks:
        panels = contents[block]
        rows_of = [panels[i : i + n_cols] for i in range(0, len(panels), n_cols)]
        heights.append(sum(max(panel_height(members) for _, members in row) for row in rows_of) + 0.4)
    title = title and "\n".join(_wrap([title], 5.0 * n_cols, STYLE["figure.titlesize"]))
    figure, content = _canvas(5.0 * n_cols, sum(heights), title, notes=notes, flagged=flagged_lines(frame))
    subfigures = content.subfigures(len(blocks), 1, height_ratios=heights, squeeze=False)[:, 0]
    for block, sub in zip(blocks, subfigures):
        (dataset, task, model), mode = block
        rows = _panel_rows(frame, dataset, task, model, mode)
        low, high = _fit(list(rows["ci_low"]) + list(rows["ci_high"]))
        panels = contents[block]
        axes = sub.subplots(math.ceil(len(panels) / n_cols), n_cols, squeeze=False, sharey=True).flatten()
        for ax in axes[len(panels) :]:
            ax.set_visible(False)
        for k, (ax, (family, members)) in enumerate(zip(axes, panels)):
            _full_cache_reference(ax, rows, f"{label(BASELINE_METHOD)} (100% kept)")
            drawn = highlighted + [m for m in members if m not in highlighted]
            lines = {m: rows[rows["method"] == m].sort_values("retention") for m in drawn}
            lines = {m: line for m, line in lines.items() if not line.empty}
            offsets = point_offsets(lines)
            for method, line in lines.items():
                bold = method in highlighted
                _draw_line(
                    ax,
                    line,
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
            _retention_ticks(ax, _drawn_retentions(rows), any(offsets.values()))
            ax.set_ylim(low, high)
            ax.set_title(f"{family} ({len(members)})")
            ax.grid(alpha=0.3)
            if k % n_cols == 0:
                ax.set_ylabel(f"{rows['metric'].iloc[0]} x100")
            handles, texts = ax.get_legend_handles_labels()
            order = _row_major(list(range(len(handles))), 2)
            ax.legend(
                [handles[i] for i in order],
                [texts[i] for i in order],
                loc="upper center",
                bbox_to_anchor=(0.5, -0.16),
                ncols=2,
                frameon=False,
            )
        heading = f"{_group_label(dataset, task, model)} · {_mode_label(mode)} · {_n_text(rows)}"
        sub.suptitle("\n".join(_wrap([heading], 5.0 * n_cols, 10)), fontsize=10)
    return figure
