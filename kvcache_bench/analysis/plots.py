"""Figures from the study's tables. Each figure is its own function, rule, script and file.

What a figure draws in colour is the "versus" view (``analysis.versus``): the highlighted methods (your
press; by default every custom press and the full cache) on the same axes as the study's strongest and the
classic baselines, the other methods faint behind them; ``quality_by_family`` is the appendix that draws
every method in colour, one panel per method family (a family is never split across panels).

Every method keeps one colour and marker in every figure, whatever else the study contains: its marker is
its family's (and part of a family, ten methods a part), its colour its place among that part's methods in the
catalogue (Okabe-Ito for a family's first ten, Paul Tol's muted colours for the next ten: distinguishable with
the common colour-vision deficiencies, and markers so the lines survive greyscale). Full cache is black; a custom
press takes one of four colours kept for custom presses (``CUSTOM_COLOURS``).
Incomplete cells (fewer examples than asked for) are never drawn.

Every figure keeps the layout rules of ``analysis.layout`` (no text over text, at most 2,400 px wide, no text
under 8 pt): panels and legends are placed by matplotlib's constrained layout, captions are wrapped to the
figure's width, and a panel that would show no variation is replaced by a sentence in the caption.
"""

from __future__ import annotations

import math
import textwrap
import zlib
from functools import wraps
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from kvcache_bench.analysis.aggregate import (  # noqa: E402
    BASELINE_BATCH_SIZE,
    BASELINE_METHOD,
    question_change_cost,
    retention_percent,
)
from kvcache_bench.analysis.layout import SAVE_DPI, layout_report  # noqa: E402
from kvcache_bench.analysis.measured import MEASURED_COLUMNS, cell_warnings  # noqa: E402
from kvcache_bench.analysis.versus import (  # noqa: E402
    ALL_IN_COLOUR_UP_TO,
    STRONGEST,
    by_score,
    labeller,
    mean_scores,
    modes_in_order,
    versus_methods,
)
from kvcache_bench.files import atomic_path  # noqa: E402
from kvcache_bench.methods.catalogue import CUSTOM  # noqa: E402
from kvcache_bench.methods.registry import METHODS  # noqa: E402

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
    frame = _complete(_one_decode_batch(summary[summary["batch_size"] == BASELINE_BATCH_SIZE]))
    if frame.empty:
        return _empty_figure("No complete batch-1 cells to plot.", title)
    label = labeller(summary, labels)
    notes = []
    for _, rows in frame.groupby(["dataset", "task", "model"]):
        if _constant(rows):  # a row of panels with no variation is a sentence instead
            notes.append(
                _constant_note(rows, label, ", ".join(_mode_label(m) for m in modes_in_order(rows["question_mode"])))
            )
            frame = frame.drop(rows.index)
    if frame.empty:
        return _empty_figure("\n".join(notes), title)
    groups = sorted(frame.groupby(["dataset", "task", "model"]).groups)
    modes = modes_in_order(frame["question_mode"])
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
    frame = _complete(_one_decode_batch(summary[summary["batch_size"] == BASELINE_BATCH_SIZE]))
    if frame.empty:
        return _empty_figure("No complete batch-1 cells to plot.", title)
    label = labeller(summary, labels)
    notes = ["Shading or whiskers: 95% bootstrap interval; each legend in order of mean score."]
    for (*_, mode), rows in frame.groupby(["dataset", "task", "model", "question_mode"]):
        if _constant(rows):
            notes.append(_constant_note(rows, label, _mode_label(mode)))
            frame = frame.drop(rows.index)
    if frame.empty:
        return _empty_figure("\n".join(notes[1:]), title)
    groups = sorted(frame.groupby(["dataset", "task", "model"]).groups)
    blocks = [(group, mode) for group in groups for mode in modes_in_order(frame["question_mode"])]
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
    frame = _complete(_one_decode_batch(summary[summary["batch_size"] == BASELINE_BATCH_SIZE]))
    examples = _one_decode_batch(per_example[per_example["batch_size"] == BASELINE_BATCH_SIZE])
    modes = modes_in_order(frame["question_mode"]) if not frame.empty else []
    compared = [m for m in modes if m != "question_aware"]
    costs = (
        _question_change_costs(examples, compared, seed, n_resamples)
        if "question_aware" in modes and compared
        else pd.DataFrame()
    )
    if costs.empty:
        return _empty_figure("No method ran question_aware and another question mode on the same examples.", title)
    label = labeller(summary, labels)
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
