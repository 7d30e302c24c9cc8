"""What every figure shares: the 8 pt style, the canvas with its wrapped caption, legends, saving.

A figure is saved with its layout report (analysis.layout) for its manifest. Each method's colour and marker are
``palette``'s, the cells a figure draws and their labels ``cells``', the lines of a panel ``panels``'.

Figure modules of this package import the underscored helpers of these modules: they are private to
``analysis.figures``.
"""

from __future__ import annotations

import textwrap
from functools import wraps
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib import image

from kvcache_bench.analysis.layout import SAVE_DPI, layout_report
from kvcache_bench.analysis.versus import ALL_IN_COLOUR_UP_TO
from kvcache_bench.files import atomic_path

SMALL_MULTIPLES_ABOVE = ALL_IN_COLOUR_UP_TO  # more methods than this: the versus view, and the family appendix
PANEL_COLUMNS = 3
FIGURE_WIDTH_MAX = 15.0  # inches: 2,250 px at SAVE_DPI, under the layout rules' 2,400 with the save padding
# Text as typed: a custom label is the user's text, and with mathtext on, '$x$' was drawn as a math italic x,
# '$1 and $2' lost its dollar signs, and '$\frac$' crashed the figure job (ParseSyntaxException). No figure
# here writes math.
LITERAL_TEXT = {"text.parse_math": False}
STYLE = {  # the layout rules' 8 pt floor, everywhere
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 11,
    **LITERAL_TEXT,
}


def _styled(draw):
    """Build the figure under the figures' font sizes (matplotlib reads them when each text is made)."""

    @wraps(draw)
    def styled(*args, **kwargs):
        with plt.rc_context(STYLE):
            return draw(*args, **kwargs)

    return styled


def save_figure(figure, png_path: str | Path, svg_path: str | Path | None = None) -> dict:
    """Save as PNG (and SVG), whole, at SAVE_DPI; returns the layout report (``analysis.layout``) of exactly
    what was saved, for the manifest. Constrained layout leaves no margin to crop, and a legend anchored to
    the figure stays where it was drawn only without bbox_inches="tight". The layout the report measured is then
    kept for both files (the layout engine switched off): constrained layout solved again at each save took two
    thirds of a large figure's time (13 s of a 104-panel scatter's), and the files are then exactly what was
    measured. The PNG is the canvas the report drew: one draw fewer, a third of a large figure's saving."""
    report = layout_report(figure, SAVE_DPI)
    figure.set_layout_engine("none")
    with atomic_path(png_path) as tmp:
        # the pixels the report measured, written as savefig's PNG writer writes them (Agg's print_png is this
        # same imsave of the canvas after drawing it once more): a third draw of the figure saved
        image.imsave(tmp, figure.canvas.buffer_rgba(), format="png", origin="upper", dpi=SAVE_DPI)
    if svg_path is not None:
        # no timestamp, and ids hashed from a fixed salt rather than a random one: an unchanged figure is an
        # unchanged file (with matplotlib's default salt every save named its paths anew)
        with atomic_path(svg_path) as tmp, plt.rc_context({"svg.hashsalt": "kvcache-bench"}):
            figure.savefig(tmp, format="svg", dpi=SAVE_DPI, metadata={"Date": None})
    plt.close(figure)
    return report


CAPTION_PT = 8
CHAR_EM = 0.62  # a character's mean width in DejaVu Sans, in ems (a little over, so wrapped lines fit)
LINE_EM = 1.3


def _wrap(lines: list[str], width_inches: float, fontsize: float = CAPTION_PT) -> list[str]:
    """Lines wrapped to ``width_inches``: a line longer than the figure would run off it."""
    per_line = max(30, int(width_inches * 72 / (CHAR_EM * fontsize)))
    return [wrapped for line in lines for wrapped in (textwrap.wrap(line, per_line) or [""])]


def _text_height(n_lines: int, fontsize: float = CAPTION_PT) -> float:
    return n_lines * LINE_EM * fontsize / 72


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
