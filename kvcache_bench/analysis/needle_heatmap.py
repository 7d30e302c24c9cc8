"""The needle test's figure: per press, its depth x length heat map of scores beside the full cache's.

Each panel is one cell (a method at a retention): context length across, needle depth down, each square
the example's score (kvpress's ROUGE-L F of the needle, 0-1) written in it. The rows file says where each
example's needle is (``needle_depth``, ``max_context_length``, by ``_id``); the score files say how it was
answered. A square with no score (an example the cell did not reach) is left blank and counted in the title.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from kvcache_bench.files import atomic_path  # noqa: E402


def grid_positions(rows: list[dict]) -> tuple[list[int], list[int], dict[str, tuple[int, int]]]:
    """The grid's lengths and depths (sorted) and each example id's (depth index, length index)."""
    lengths = sorted({int(row["max_context_length"]) for row in rows})
    depths = sorted({int(row["needle_depth"]) for row in rows})
    where = {
        str(row["_id"]): (depths.index(int(row["needle_depth"])), lengths.index(int(row["max_context_length"])))
        for row in rows
    }
    return lengths, depths, where


def score_grid(rows: list[dict], scores: list[dict]) -> tuple[list[int], list[int], np.ndarray]:
    """Mean score per (depth, length); NaN where no example of the cell was scored."""
    lengths, depths, where = grid_positions(rows)
    total = np.zeros((len(depths), len(lengths)))
    count = np.zeros_like(total)
    for record in scores:
        if str(record["id"]) not in where:
            raise ValueError(f"score for example {record['id']!r}, which the needle rows do not have")
        i, j = where[str(record["id"])]
        total[i, j] += float(record["score"])
        count[i, j] += 1
    with np.errstate(invalid="ignore"):
        return lengths, depths, np.where(count > 0, total / np.maximum(count, 1), np.nan)


def heatmap_figure(panels: list[tuple[str, list[int], list[int], np.ndarray]], title: str):
    """One heat map per (label, lengths, depths, grid), side by side, on one colour scale (0-1)."""
    figure, axes = plt.subplots(1, len(panels), figsize=(1.2 + 2.6 * len(panels), 3.4), squeeze=False, sharey=True)
    image = None
    for axis, (label, lengths, depths, grid) in zip(axes[0], panels):
        image = axis.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
        axis.set_xticks(
            range(len(lengths)), [f"{length // 1024}k" if length % 1024 == 0 else str(length) for length in lengths]
        )
        axis.set_yticks(range(len(depths)), [f"{depth}%" for depth in depths])
        axis.set_xlabel("context length (tokens)")
        missing = int(np.isnan(grid).sum())
        axis.set_title(  # a custom press's label drawn as typed: '$x$' is no math (analysis.figures.style)
            label + (f"\n({missing} not scored)" if missing else f"\nmean {np.nanmean(grid):.2f}"),
            fontsize=9,
            parse_math=False,
        )
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                axis.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
    axes[0][0].set_ylabel("needle depth")
    figure.colorbar(image, ax=list(axes[0]), fraction=0.03, pad=0.02, label="ROUGE-L F of the needle")
    figure.suptitle(title, fontsize=10)
    return figure


def save(figure, png_path: str | Path, svg_path: str | Path) -> None:
    for path, fmt in ((png_path, "png"), (svg_path, "svg")):
        with atomic_path(path) as tmp:
            # no timestamp in the SVG: an unchanged figure is an unchanged file
            figure.savefig(
                tmp, format=fmt, dpi=150, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None
            )
    plt.close(figure)
