"""Per example: each method's score against the full cache's on the same example."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.lines import Line2D

from kvcache_bench.analysis.aggregate import BASELINE_BATCH_SIZE, BASELINE_METHOD
from kvcache_bench.analysis.figures.cells import _group_label, _mode_label, _one_decode_batch, _panel_rows
from kvcache_bench.analysis.figures.palette import MARKERS, RETENTION_COLOURS, methods_in_order
from kvcache_bench.analysis.figures.style import _canvas, _empty_figure, _legend, _styled
from kvcache_bench.analysis.versus import STRONGEST, labeller, modes_in_order, versus_methods


@_styled
def paired_scatter(
    per_example: pd.DataFrame,
    title: str | None = None,
    point_alpha: float = 0.5,
    max_columns: int = 4,
    highlight=(),
    strongest: int = STRONGEST,
    labels: dict[str, str] | None = None,
):
    """Each example's score with a method (y) against its score with full cache (x), same example.

    Points above the diagonal are examples the method answered better than the full cache. The counts of
    better/worse/tied examples are printed in each panel: ties are common (0 or 1 scores), so points that
    overlap are still counted. A block of panels per dataset/task/model and question mode, one panel per method
    of the versus view; a block whose full cache scored the same on every example has no spread to show and
    is a sentence under the figure instead.
    """
    frame = _one_decode_batch(per_example[per_example["batch_size"] == BASELINE_BATCH_SIZE])
    keys = ["dataset", "task", "model", "question_mode", "id"]
    baseline = frame[frame["method"] == BASELINE_METHOD][keys + ["score"]].rename(columns={"score": "full_score"})
    paired = frame[frame["method"] != BASELINE_METHOD].merge(baseline, on=keys, how="inner")
    if paired.empty:
        return _empty_figure("No examples scored with both a method and the full cache.", title)
    label = labeller(per_example, labels)
    cells = paired.groupby(["method", "question_mode", "retention"], as_index=False)["score"].mean()
    coloured, faint = versus_methods(cells.assign(score=100 * cells["score"]), highlight, strongest)
    blocks, notes = [], []
    for dataset, task, model in sorted(paired.groupby(["dataset", "task", "model"]).groups):
        group = _panel_rows(paired, dataset, task, model)
        constant = []
        for mode in modes_in_order(group["question_mode"]):
            rows = group[group["question_mode"] == mode]
            full = rows.drop_duplicates("id")["full_score"]
            if full.nunique() == 1:
                constant.append((mode, 100 * full.iloc[0], len(full)))
            else:
                blocks.append(((dataset, task, model), mode, [m for m in coloured if m in set(rows["method"])]))
        if constant:
            modes = ", ".join(f"{_mode_label(mode)} ({n} examples)" for mode, _, n in constant)
            values = sorted({value for _, value, _ in constant})
            notes.append(
                f"{_group_label(dataset, task, model)}: the full cache scored {' or '.join(f'{v:g}' for v in values)} "
                f"on every example in {modes}, so every point would sit on one vertical line: no panel is drawn "
                "(summary.md gives each method's paired difference to it)."
            )
    if faint:
        notes.append(
            f"{len(faint)} methods outside the versus view are not drawn: "
            + ", ".join(label(m) for m in methods_in_order(faint))
            + " (results/tables/per_example.csv)."
        )
    if not blocks:
        return _empty_figure("\n".join(notes), title)
    retentions = sorted(paired["retention"].unique(), reverse=True)
    n_cols = min(max_columns, max(len(methods) for _, _, methods in blocks))
    heights = [3.4 * math.ceil(len(methods) / n_cols) + 0.4 for _, _, methods in blocks]
    width = max(6.5, 3.4 * n_cols)
    figure, content = _canvas(width, sum(heights) + 0.7, title, notes=notes)
    # the legend gets a row of its own: an 'outside' legend on a subfigure (the panels when a caption is drawn) is not
    # given room by constrained layout, and would sit over the last block's axis labels
    *subfigures, legend_row = content.subfigures(len(blocks) + 1, 1, height_ratios=[*heights, 0.7], squeeze=False)[:, 0]
    for ((dataset, task, model), mode, methods), sub in zip(blocks, subfigures):
        rows = _panel_rows(paired, dataset, task, model, mode)
        axes = sub.subplots(math.ceil(len(methods) / n_cols), n_cols, squeeze=False, sharex=True, sharey=True).flatten()
        for ax in axes[len(methods) :]:
            ax.set_visible(False)
        metric = rows["metric"].iloc[0]
        for k, (ax, method) in enumerate(zip(axes, methods)):
            cell = rows[rows["method"] == method]
            ax.plot([0, 100], [0, 100], color="#777777", linewidth=0.8, linestyle=":")
            for j, retention in enumerate(retentions):
                points = cell[cell["retention"] == retention]
                if not points.empty:
                    ax.scatter(
                        points["full_score"] * 100,
                        points["score"] * 100,
                        s=16,
                        alpha=point_alpha,
                        color=RETENTION_COLOURS[j % len(RETENTION_COLOURS)],
                        marker=MARKERS[j % len(MARKERS)],
                        label=f"{retention:.0%} kept",
                        edgecolors="none",
                    )
            better = int((cell["score"] > cell["full_score"]).sum())
            worse = int((cell["score"] < cell["full_score"]).sum())
            tied = len(cell) - better - worse
            # the counts in the title: inside the panel they would cover the points at its corners
            ax.set_title(
                f"{label(method)}\nbetter {better} · worse {worse} · tied {tied}",
                fontweight="bold" if method in highlight else None,
            )
            if k + n_cols >= len(methods):  # bottom row of this block
                ax.set_xlabel(f"full cache: {metric} x100")
            if k % n_cols == 0:
                ax.set_ylabel(f"method: {metric} x100")
            ax.set_xlim(-5, 105)
            ax.set_ylim(-5, 105)
            ax.set_aspect("equal")
            ax.grid(alpha=0.3)
        sub.suptitle(f"{_group_label(dataset, task, model)} · {_mode_label(mode)}", fontsize=10)
    handles = [
        Line2D(
            [],
            [],
            linestyle="none",
            color=RETENTION_COLOURS[j % len(RETENTION_COLOURS)],
            marker=MARKERS[j % len(MARKERS)],
        )
        for j in range(len(retentions))
    ]
    _legend(
        legend_row,
        handles,
        [f"{r:.0%} kept" for r in retentions],
        "one point per example and retention; better/worse/tied count examples x retentions",
        width,
        loc="center",
    )
    return figure
