"""What a panel over the cache kept is drawn with: axis limits fitted to the data, ticks at the measured
retentions, a method's line and band (or point and whiskers), the faint field behind it, the full cache's
reference line."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from kvcache_bench.analysis.aggregate import BASELINE_METHOD
from kvcache_bench.analysis.figures.palette import FAINT_COLOUR, FULL_CACHE_COLOUR

DODGE = 1.2  # percentage points of x between methods measured at one retention only, drawn at the same x


def _fit(
    values, floor: float = -2.0, ceiling: float = 102.0, pad: float = 0.08, minimum: float = 6.0
) -> tuple[float, float]:
    """Axis limits around ``values`` (scores or differences, x100) with a margin, inside the metric's range."""
    values = [float(v) for v in values if not pd.isna(v)]
    if not values:
        return floor, ceiling
    low, high = min(values), max(values)
    span = max(high - low, minimum)
    return max(floor, low - pad * span), min(ceiling, high + pad * span)


def _retention_ticks(ax, retentions, offsets_used: bool) -> None:
    """x ticks at the measured retentions, limits fitted to them (not a 0-100 axis for data at 10-50)."""
    xs = sorted({round(100 * float(r), 6) for r in retentions})
    span = max(xs[-1] - xs[0], 20.0)
    ax.set_xlim(xs[0] - 0.12 * span, xs[-1] + 0.12 * span)
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_xlabel("KV cache kept (% of prompt tokens)" + (", points dodged" if offsets_used else ""))


def point_offsets(lines: dict[str, pd.DataFrame]) -> dict[str, float]:
    """x offsets for the methods drawn as one point (one retention), so that points sharing an x and their
    intervals do not hide each other; a method with a line is drawn where it was measured."""
    offsets, by_x = {}, {}
    for method, line in lines.items():
        if len(line) == 1:
            by_x.setdefault(float(line["retention"].iloc[0]), []).append(method)
    for at_x in by_x.values():
        if len(at_x) > 1:
            offsets.update({m: (i - (len(at_x) - 1) / 2) * DODGE for i, m in enumerate(at_x)})
    return offsets


def _draw_line(
    ax,
    line: pd.DataFrame,
    y: str,
    low: str,
    high: str,
    label: str,
    style: dict,
    band_alpha: float,
    offset: float = 0.0,
    linewidth: float = 1.6,
    zorder: float = 3,
) -> None:
    """A method's line with its interval as a band, or, measured at one retention, its point with an error bar."""
    x = (line["retention"] * 100 + offset).to_numpy()
    if len(line) == 1:
        errors = np.vstack([(line[y] - line[low]).to_numpy(), (line[high] - line[y]).to_numpy()])
        ax.errorbar(
            x,
            line[y].to_numpy(),
            yerr=errors,
            label=label,
            linestyle="none",
            markersize=5,
            capsize=2.5,
            elinewidth=max(1.0, linewidth - 0.6),
            zorder=zorder,
            **style,
        )
        return
    ax.plot(x, line[y], label=label, linewidth=linewidth, markersize=5, zorder=zorder, **style)
    ax.fill_between(x, line[low], line[high], color=style["color"], alpha=band_alpha, linewidth=0, zorder=zorder - 1)


def _draw_faint(ax, line: pd.DataFrame, y: str, offset: float = 0.0) -> None:
    """A method outside the versus view: behind the others, grey, no band (ranking.md names it)."""
    x = (line["retention"] * 100 + offset).to_numpy()
    ax.plot(
        x,
        line[y],
        color=FAINT_COLOUR,
        linewidth=0.9,
        marker="." if len(line) == 1 else None,
        markersize=4,
        alpha=0.8,
        zorder=1,
        label="_faint",
    )


def _full_cache_reference(ax, panel: pd.DataFrame, label: str) -> pd.Series | None:
    full = panel[panel["method"] == BASELINE_METHOD]
    if full.empty:
        return None
    base = full.iloc[0]
    ax.axhline(base["score"], color=FULL_CACHE_COLOUR, linestyle="--", linewidth=1.4, label=label, zorder=2)
    ax.axhspan(base["ci_low"], base["ci_high"], color=FULL_CACHE_COLOUR, alpha=0.08, linewidth=0)
    return base


def _faint_handle(count: int) -> tuple[Line2D, str]:
    return Line2D(
        [], [], color=FAINT_COLOUR, linewidth=0.9
    ), f"{count} other methods, faint (results/tables/ranking.md)"
