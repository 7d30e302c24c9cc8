"""Layout rules every figure is held to, checked with matplotlib's own renderer at the dpi it is saved at.

A figure a reader pastes into a paper must not have text over text, must fit a page column or a slide
(``MAX_WIDTH_PX`` at the saved dpi) and must stay legible when shrunk (no text under ``MIN_FONT_PT``).
``layout_report`` measures a drawn figure; ``save_figure`` (analysis.figures.style) records it in the figure's
manifest and logs every problem, and the tests hold every figure the demo and ``reference_figures`` draw
to an empty list of problems.
"""

from __future__ import annotations

import itertools
import logging

from matplotlib.artist import Artist
from matplotlib.axis import Axis
from matplotlib.text import Text

SAVE_DPI = 150
MAX_WIDTH_PX = 2400
MIN_FONT_PT = 8.0
OVERLAP_PX = 1.0  # boxes touching along a pixel's edge (anti-aliasing) are not text over text

logger = logging.getLogger("kvcache_bench")


def _drawn_texts(artist: Artist) -> list[Text]:
    """Every Text the renderer draws under ``artist``: visible, non-empty, and for an axis only the ticks it
    draws (an Axis holds labels for ticks outside its view limits too, which are never drawn)."""
    if not artist.get_visible():
        return []
    if isinstance(artist, Text):
        return [artist] if artist.get_text().strip() else []
    if isinstance(artist, Axis):
        children = [artist.label, artist.offsetText]
        for tick in artist._update_ticks():  # the ticks Axis.draw draws, inside the view interval
            children += [tick.label1, tick.label2]
    else:
        children = artist.get_children()
    return [text for child in children for text in _drawn_texts(child)]


def _describe(text: Text) -> str:
    return repr(text.get_text().replace("\n", " ")[:60])


def layout_report(
    figure, dpi: int = SAVE_DPI, max_width_px: int = MAX_WIDTH_PX, min_font_pt: float = MIN_FONT_PT
) -> dict:
    """The saved size in pixels and every broken rule: a text under ``min_font_pt``, two texts whose boxes
    intersect, a text running off the figure, a width over ``max_width_px``. Draws the figure at ``dpi``, as
    savefig does: figures are saved whole (no bbox_inches="tight", which re-anchors a figure legend to the
    cropped box and so can move it over other text), so what is measured here is what the file holds."""
    figure.set_dpi(dpi)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    width_px, height_px = (
        int(figure.bbox.width),
        int(figure.bbox.height),
    )  # the saved file, pixel for pixel (Agg truncates)
    problems = []
    if width_px > max_width_px:
        problems.append(f"{width_px} px wide at {dpi} dpi (at most {max_width_px})")
    texts = list(dict.fromkeys(_drawn_texts(figure)))  # a legend's texts are reachable twice
    for text in texts:
        if text.get_fontsize() < min_font_pt:
            problems.append(f"text {_describe(text)} at {text.get_fontsize():g} pt (at least {min_font_pt:g})")
    boxes = [(text, text.get_window_extent(renderer)) for text in texts]
    for text, box in boxes:  # the file is the figure's area: a text beyond it is cut off
        if (
            box.x0 < -OVERLAP_PX
            or box.y0 < -OVERLAP_PX
            or box.x1 > width_px + OVERLAP_PX
            or box.y1 > height_px + OVERLAP_PX
        ):
            problems.append(f"text {_describe(text)} runs off the figure")
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        overlap_x = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
        overlap_y = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
        if overlap_x > OVERLAP_PX and overlap_y > OVERLAP_PX:
            problems.append(f"text {_describe(a)} overlaps text {_describe(b)}")
    return {"width_px": width_px, "height_px": height_px, "dpi": dpi, "texts": len(texts), "problems": problems}


def log_layout(report: dict, what: str) -> None:
    for problem in report["problems"]:
        logger.warning("layout of %s: %s", what, problem)
