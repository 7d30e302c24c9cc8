"""What every figure shares: each method's colour and marker, the 8 pt style, captions, legends, panels, saving.

A figure is saved with its layout report (analysis.layout) for its manifest.

Figure modules of this package import its underscored helpers: they are private to ``analysis.figures``.
"""

from __future__ import annotations

import textwrap
import zlib
from functools import wraps
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from kvcache_bench.analysis.aggregate import (
    BASELINE_METHOD,
    retention_percent,
)
from kvcache_bench.analysis.layout import SAVE_DPI, layout_report
from kvcache_bench.analysis.measured import MEASURED_COLUMNS, cell_warnings
from kvcache_bench.analysis.versus import (
    ALL_IN_COLOUR_UP_TO,
    labeller,
)
from kvcache_bench.files import atomic_path
from kvcache_bench.methods.catalogue import CUSTOM
from kvcache_bench.methods.registry import METHODS

# Okabe & Ito (2008), without black, which is kept for the full cache, then Paul Tol's wine and indigo.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"]
# A family's second ten: Paul Tol's muted scheme (without its pale grey), his dark brown and medium blue.
# Ordered so that the demo's eight (token scorers of both parts) are eight clearly different colours.
TOL_MUTED = [
    "#CC6677",
    "#117733",
    "#EE8866",
    "#DDCC77",
    "#AA4499",
    "#44AA99",
    "#999933",
    "#88CCEE",
    "#661100",
    "#6699CC",
]
PALETTES = (OKABE_ITO + ["#882255", "#332288"], TOL_MUTED)
METHOD_COLOURS = PALETTES[0] + PALETTES[1]
PART_SIZE = 10  # methods per family part: each of one palette's ten colours once
FULL_CACHE_COLOUR = "#000000"
FAINT_COLOUR = "#B8B8B8"
# Your own presses: colours none of the twenty above is close to (deep pink, dark turquoise, crimson, brown), so
# a custom press drawn against the field never shares a built-in method's colour.
CUSTOM_COLOURS = ["#FF1493", "#00CED1", "#DC143C", "#8C510A"]
# One marker per family part, in the catalogue's order of parts; custom methods take the last two.
PART_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "*", "p", "<", ">", "d", "H"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "*", "p"]  # retentions in the paired scatter
RETENTION_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
COMPRESSED_METHODS = [name for name in METHODS if name != BASELINE_METHOD]
SMALL_MULTIPLES_ABOVE = ALL_IN_COLOUR_UP_TO  # more methods than this: the versus view, and the family appendix
PANEL_COLUMNS = 3
FIGURE_WIDTH_MAX = 15.0  # inches: 2,250 px at SAVE_DPI, under the layout rules' 2,400 with the save padding
STYLE = {  # the layout rules' 8 pt floor, everywhere
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 11,
}
QUESTION_MODE_STYLES = {
    "question_aware": {"color": "#0072B2", "marker": "o"},
    "question_agnostic": {"color": "#7F7F7F", "marker": "s"},
    "other_question": {"color": "#D55E00", "marker": "^"},
    "same_question": {"color": "#009E73", "marker": "D"},
}
MODE_WORDS = {  # what each question mode means, in a legend
    "question_aware": "question-aware (the press saw this question)",
    "question_agnostic": "question-agnostic (no question)",
    "other_question": "other-question (another question's cache)",
    "same_question": "same-question (this question, its slots removed)",
}


def _catalogue_slots() -> dict[str, tuple[str, int, int]]:
    """Each built-in method's (family, part of the family, place in the part), in the catalogue's order."""
    slots, seen = {}, {}
    for name in COMPRESSED_METHODS:
        family = METHODS[name].family
        place = seen.get(family, 0)
        seen[family] = place + 1
        slots[name] = (family, place // PART_SIZE, place % PART_SIZE)
    return slots


METHOD_SLOTS = _catalogue_slots()
FAMILIES = list(dict.fromkeys(family for family, _, _ in METHOD_SLOTS.values())) + [CUSTOM]
# Parts family by family (the catalogue's order of families): the order of markers.
PARTS = sorted(
    set((family, part) for family, part, _ in METHOD_SLOTS.values()), key=lambda fp: (FAMILIES.index(fp[0]), fp[1])
)
PARTS += [(CUSTOM, 0), (CUSTOM, 1)]


def method_slot(name: str) -> tuple[str, int, int]:
    """(family, part, place) of a method. A name the catalogue does not know (a custom method) is placed by a
    hash of its name among the custom family's eight styles (four colours, two markers): stable across studies,
    not always distinct from another custom press's."""
    if name in METHOD_SLOTS:
        return METHOD_SLOTS[name]
    digest = zlib.crc32(name.encode())
    return CUSTOM, (digest // PART_SIZE) % 2, digest % PART_SIZE


def method_family(name: str) -> str:
    """The panel a method is drawn in by ``quality_by_family``: its whole family, never a part of it."""
    return method_slot(name)[0]


def method_style(name: str) -> dict:
    """The same colour and marker for a method in every figure, whatever else the study contains.

    The marker is its family part's; the colour its place in that part (shifted per family, so that the first
    methods of two families differ in colour too): the (colour, marker) pair is the method's own.
    """
    if name == BASELINE_METHOD:
        return {"color": FULL_CACHE_COLOUR, "marker": None}
    family, part, place = method_slot(name)
    if family == CUSTOM:
        colour = CUSTOM_COLOURS[place % len(CUSTOM_COLOURS)]
    else:
        colour = PALETTES[part % 2][(place + 3 * FAMILIES.index(family)) % PART_SIZE]
    return {"color": colour, "marker": PART_MARKERS[PARTS.index((family, part))]}


def methods_in_order(names) -> list[str]:
    """Compressed methods in the catalogue's order, then unknown names sorted."""
    names = set(names) - {BASELINE_METHOD}
    return [m for m in COMPRESSED_METHODS if m in names] + sorted(names - set(METHODS))


def families_of(methods: list[str]) -> list[tuple[str, list[str]]]:
    """[(family, its methods)] in the catalogue's order of families, each family whole."""
    by_family: dict[str, list[str]] = {}
    for method in methods:
        by_family.setdefault(method_family(method), []).append(method)
    return [(family, by_family[family]) for family in FAMILIES if family in by_family]


def _styled(draw):
    """Build the figure under the figures' font sizes (matplotlib reads them when each text is made)."""

    @wraps(draw)
    def styled(*args, **kwargs):
        with plt.rc_context(STYLE):
            return draw(*args, **kwargs)

    return styled


def _one_decode_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of the smallest decode batch size present: decode batching must not change answers, so one
    setting speaks for all (and a study that also ran others gets one line per method, not several)."""
    if frame.empty:
        return frame
    return frame[frame["decode_batch_size"] == frame["decode_batch_size"].min()]


def setting_label(batch_size: int, decode_batch_size: int) -> str:
    """A full-cache setting as the batch-size figure names it: prefill batch, and decode batch when above 1."""
    return f"batch {batch_size}" + (f"\ndecode {decode_batch_size}" if decode_batch_size > 1 else "")


def save_figure(figure, png_path: str | Path, svg_path: str | Path | None = None) -> dict:
    """Save as PNG (and SVG), whole, at SAVE_DPI; returns the layout report (``analysis.layout``) of exactly
    what was saved, for the manifest. Constrained layout leaves no margin to crop, and a legend anchored to
    the figure stays where it was drawn only without bbox_inches="tight"."""
    report = layout_report(figure, SAVE_DPI)
    for path, fmt in ((png_path, "png"), (svg_path, "svg")):
        if path is None:
            continue
        with atomic_path(path) as tmp:
            # no timestamp in the SVG: an unchanged figure is an unchanged file
            metadata = {"Date": None} if fmt == "svg" else None
            figure.savefig(tmp, format=fmt, dpi=SAVE_DPI, metadata=metadata)
    plt.close(figure)
    return report


def _complete(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[~frame["incomplete"].astype(bool)] if "incomplete" in frame else frame


def _mode_label(mode: str) -> str:
    return mode.replace("_", "-")


def _group_label(dataset: str, task: str, model: str) -> str:
    return f"{model} · {dataset}/{task}"


def _panel_rows(frame: pd.DataFrame, dataset: str, task: str, model: str, mode: str | None = None) -> pd.DataFrame:
    selected = (frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
    if mode is not None:
        selected &= frame["question_mode"] == mode
    return frame[selected]


def _n_text(panel: pd.DataFrame, column: str = "n") -> str:
    n_values = sorted(set(panel[column]))
    return f"n = {n_values[0]}" if len(n_values) == 1 else f"n = {n_values[0]}-{n_values[-1]}"


CAPTION_PT = 8
CHAR_EM = 0.62  # a character's mean width in DejaVu Sans, in ems (a little over, so wrapped lines fit)
LINE_EM = 1.3


def _wrap(lines: list[str], width_inches: float, fontsize: float = CAPTION_PT) -> list[str]:
    """Lines wrapped to ``width_inches``: a line longer than the figure would run off it."""
    per_line = max(30, int(width_inches * 72 / (CHAR_EM * fontsize)))
    return [wrapped for line in lines for wrapped in (textwrap.wrap(line, per_line) or [""])]


def _text_height(n_lines: int, fontsize: float = CAPTION_PT) -> float:
    return n_lines * LINE_EM * fontsize / 72


def flagged_lines(summary: pd.DataFrame) -> list[str]:
    """The cells a figure draws that were measured other than they asked (``analysis.measured``), one caption
    line per method and setting with the retentions it asked (a masking press is off at every retention)."""
    if summary.empty or not set(MEASURED_COLUMNS) <= set(summary.columns):
        return []
    label, flagged = labeller(summary), {}
    for row in summary.itertuples():
        if warnings := cell_warnings(row):
            measured = tuple(warning.split(", asked")[0] for warning in warnings)
            key = (
                row.model,
                row.dataset,
                row.task,
                row.question_mode,
                row.batch_size,
                row.decode_batch_size,
                row.method,
                measured,
            )
            flagged.setdefault(key, []).append(float(row.retention))
    lines = [
        f"{label(method)} asked {', '.join(retention_percent(r) for r in sorted(asked, reverse=True))} "
        f"({_group_label(dataset, task, model)} · {_mode_label(mode)}, batch {batch}, decode {decode}): "
        f"{'; '.join(measured)}"
        for (model, dataset, task, mode, batch, decode, method, measured), asked in flagged.items()
    ]
    return ["Measured other than asked (results/tables/summary.md):"] + lines if lines else []


def _canvas(width: float, height: float, title: str | None = None, notes=(), flagged=()):
    """A figure of ``width`` x ``height`` inches of panels (the subfigure returned, to draw in) over its caption:
    ``notes`` (panels replaced by a sentence, methods left out), then ``flagged`` in red. The caption is a
    subfigure of its own height, so constrained layout keeps it clear of panels and legends."""
    width = min(width, FIGURE_WIDTH_MAX)
    notes, flagged = _wrap(list(notes), width - 0.2), _wrap(list(flagged), width - 0.2)
    caption_height = _text_height(len(notes) + len(flagged) + (1 if notes and flagged else 0)) + (
        0.25 if notes or flagged else 0
    )
    figure = plt.figure(figsize=(width, height + caption_height), layout="constrained")
    if not caption_height:
        content = figure
    else:
        content, caption = figure.subfigures(2, 1, height_ratios=[height, caption_height])
        top = 1 - 0.1 / caption_height
        if notes:
            caption.text(
                0.01,
                top,
                "\n".join(notes),
                va="top",
                ha="left",
                fontsize=CAPTION_PT,
                color="#333333",
                linespacing=LINE_EM / 1.2,
            )
            top -= _text_height(len(notes) + 1) / caption_height
        if flagged:
            caption.text(
                0.01,
                top,
                "\n".join(flagged),
                va="top",
                ha="left",
                fontsize=CAPTION_PT,
                color="firebrick",
                linespacing=LINE_EM / 1.2,
            )
    if title:
        content.suptitle(title, fontsize=STYLE["figure.titlesize"])
    return figure, content


def _empty_figure(message: str, title: str | None):
    """A figure that is its caption: the sentence that replaces panels with nothing to show."""
    figure, _ = _canvas(7.5, 0.45 if title else 0.05, title, notes=message.split("\n"))
    return figure


def _legend_columns(labels: list[str], width_inches: float) -> int:
    """As many columns as the widest entry allows across ``width_inches`` (a legend wider than the figure
    would run off it)."""
    entry = max(len(text) for text in labels) * CHAR_EM * STYLE["legend.fontsize"] + 40  # pt: handle and padding
    return max(1, min(len(labels), int(0.95 * width_inches * 72 // entry)))


def _row_major(items: list, columns: int) -> list:
    """``items`` reordered so that a legend, which fills column by column, reads left to right, row by row."""
    return [
        items[row * columns + column]
        for column in range(columns)
        for row in range(len(items))
        if row * columns + column < len(items)
    ]


def _legend(
    target,
    handles,
    labels,
    title: str | None,
    width_inches: float,
    loc: str = "outside lower center",
    columns: int | None = None,
) -> None:
    """One legend for the whole figure (or block): a method keeps its colour in every panel, so once is enough."""
    if not handles:
        return
    columns = columns or _legend_columns(labels, width_inches)
    order = _row_major(list(range(len(handles))), columns)
    target.legend(
        [handles[i] for i in order], [labels[i] for i in order], loc=loc, ncols=columns, title=title, frameon=False
    )


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


DODGE = 1.2  # percentage points of x between methods measured at one retention only, drawn at the same x


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


def _drawn_retentions(rows: pd.DataFrame):
    """The retentions the methods were measured at (the full cache is a line across, not a point at 100%)."""
    compressed = rows[rows["method"] != BASELINE_METHOD]["retention"]
    return compressed if not compressed.empty else rows["retention"]


def _constant(rows: pd.DataFrame) -> bool:
    """Every cell scored the same on every example (one value, zero-width intervals): a panel of it shows nothing."""
    values = pd.concat([rows["score"], rows["ci_low"], rows["ci_high"]])
    return not rows.empty and values.nunique() == 1


def _constant_note(rows: pd.DataFrame, label, what: str) -> str:
    dataset, task, model = rows[["dataset", "task", "model"]].iloc[0]
    methods = ", ".join(dict.fromkeys(label(m) for m in rows["method"]))
    return (
        f"{_group_label(dataset, task, model)} · {what}: every cell ({methods}) scored {rows['score'].iloc[0]:g} on "
        "every example: no panel is drawn."
    )
