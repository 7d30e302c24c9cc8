"""Figures from the study's tables. Each figure is its own function, rule, script and file.

Every method keeps one colour and marker in every figure, whatever else the study contains: its marker is
its family's (and part of a family, ten methods a part), its colour its place among that part's methods in the
catalogue (Okabe-Ito for a family's first ten, Paul Tol's muted colours for the next ten: distinguishable with
the common colour-vision deficiencies, and markers so the lines survive greyscale). Full cache is black.
A study of more than ``SMALL_MULTIPLES_ABOVE`` methods draws one panel per family part, each of at most ten
methods of ten different colours, with the full cache in each. Incomplete cells (fewer examples than asked
for) are never drawn.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from kvcache_bench.analysis.aggregate import BASELINE_BATCH_SIZE, BASELINE_METHOD, question_change_cost  # noqa: E402
from kvcache_bench.analysis.measured import flagged_caption  # noqa: E402
from kvcache_bench.io import atomic_path  # noqa: E402
from kvcache_bench.methods.catalogue import CUSTOM  # noqa: E402
from kvcache_bench.methods.registry import METHODS, method_label  # noqa: E402

# Okabe & Ito (2008), without black, which is kept for the full cache, then Paul Tol's wine and indigo.
OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#999999"]
# A family's second ten: Paul Tol's muted scheme (without its pale grey), his dark brown and medium blue.
# Ordered so that the demo's eight (token scorers of both parts) are eight clearly different colours.
TOL_MUTED = ["#CC6677", "#117733", "#EE8866", "#DDCC77", "#AA4499", "#44AA99", "#999933", "#88CCEE", "#661100", "#6699CC"]
PALETTES = (OKABE_ITO + ["#882255", "#332288"], TOL_MUTED)
METHOD_COLOURS = PALETTES[0] + PALETTES[1]
PART_SIZE = 10  # methods per family part (one panel): each of one palette's ten colours once
FULL_CACHE_COLOUR = "#000000"
# One marker per family part, in the catalogue's order of parts; custom methods take the last two.
PART_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "*", "p", "<", ">", "d", "H"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "*", "p"]  # retentions in the paired scatter
RETENTION_COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
COMPRESSED_METHODS = [name for name in METHODS if name != BASELINE_METHOD]
SMALL_MULTIPLES_ABOVE = 8  # more methods than this (full cache aside): one panel per family part
PANEL_COLUMNS = 3


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
# Parts family by family (the catalogue's order of families), so a family's two panels sit together.
PARTS = sorted(set((family, part) for family, part, _ in METHOD_SLOTS.values()), key=lambda fp: (FAMILIES.index(fp[0]), fp[1]))
PARTS += [(CUSTOM, 0), (CUSTOM, 1)]


def method_slot(name: str) -> tuple[str, int, int]:
    """(family, part, place) of a method. A name the catalogue does not know (a custom method) is placed by a
    hash of its name among the custom family's twenty styles: stable across studies, not always distinct."""
    if name in METHOD_SLOTS:
        return METHOD_SLOTS[name]
    digest = zlib.crc32(name.encode())
    return CUSTOM, (digest // PART_SIZE) % 2, digest % PART_SIZE


def method_panel(name: str) -> tuple[str, int]:
    """The panel a method is drawn in when a figure draws one per family part (every custom method: one panel)."""
    family, part, _ = method_slot(name)
    return (CUSTOM, 0) if family == CUSTOM else (family, part)


def method_style(name: str) -> dict:
    """The same colour and marker for a method in every figure, whatever else the study contains.

    The marker is its family part's; the colour its place in that part (shifted per family, so that the first
    methods of two families differ in colour too): the (colour, marker) pair is the method's own.
    """
    if name == BASELINE_METHOD:
        return {"color": FULL_CACHE_COLOUR, "marker": None}
    family, part, place = method_slot(name)
    colour = PALETTES[part % 2][(place + 3 * FAMILIES.index(family)) % PART_SIZE]
    return {"color": colour, "marker": PART_MARKERS[PARTS.index((family, part))]}


def methods_in_order(names) -> list[str]:
    """Compressed methods in the catalogue's order (the order of every figure), then unknown names sorted."""
    names = set(names) - {BASELINE_METHOD}
    return [m for m in COMPRESSED_METHODS if m in names] + sorted(names - set(METHODS))


def panels_of(methods: list[str]) -> list[tuple[tuple[str, int], list[str]]]:
    """[(family part, its methods)] in the catalogue's order of parts, each part's methods in figure order."""
    by_panel: dict[tuple[str, int], list[str]] = {}
    for method in methods:
        by_panel.setdefault(method_panel(method), []).append(method)
    return [(key, by_panel[key]) for key in PARTS if key in by_panel]


def panel_title(key: tuple[str, int], keys: list[tuple[str, int]]) -> str:
    """A family part's name: the family, and which part when the figure has more than one of it."""
    family, part = key
    parts = sorted(p for f, p in keys if f == family)
    return f"{family} ({parts.index(part) + 1} of {len(parts)})" if len(parts) > 1 else family


def _one_decode_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of the smallest decode batch size present: decode batching must not change answers, so one
    setting speaks for all (and a study that also ran others gets one line per method, not several)."""
    if frame.empty:
        return frame
    return frame[frame["decode_batch_size"] == frame["decode_batch_size"].min()]


def setting_label(batch_size: int, decode_batch_size: int) -> str:
    """A full-cache setting as the batch-size figure names it: prefill batch, and decode batch when above 1."""
    return f"batch {batch_size}" + (f"\ndecode {decode_batch_size}" if decode_batch_size > 1 else "")


def save_figure(figure, png_path: str | Path, svg_path: str | Path | None = None) -> None:
    for path, fmt in ((png_path, "png"), (svg_path, "svg")):
        if path is None:
            continue
        with atomic_path(path) as tmp:
            # no timestamp in the SVG: an unchanged figure is an unchanged file
            metadata = {"Date": None} if fmt == "svg" else None
            figure.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight", metadata=metadata)
    plt.close(figure)


def _complete(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[~frame["incomplete"].astype(bool)] if "incomplete" in frame else frame


def _mode_label(mode: str) -> str:
    return mode.replace("_", "-")


def _metric_axis_label(task: str, metric: str) -> str:
    return f"{task}: {metric} (x100, higher is better)"


def _empty_figure(message: str, title: str | None):
    figure, ax = plt.subplots(figsize=(6, 3))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    if title:
        figure.suptitle(title)
    return figure


def quality_vs_retention(summary: pd.DataFrame, title: str | None = None, band_alpha: float = 0.15):
    """Score against the share of the prompt's KV cache kept, one panel per question mode.

    Each method is a line with its 95% bootstrap band; full cache (batch 1) is a horizontal black
    line with its own band, because it keeps 100% and is what every method is compared with. With more than
    ``SMALL_MULTIPLES_ABOVE`` methods each question mode gets one panel per family part (``panels_of``).
    """
    frame = _complete(_one_decode_batch(summary[summary["batch_size"] == BASELINE_BATCH_SIZE]))
    if frame.empty:
        return _empty_figure("No complete batch-1 cells to plot.", title)
    groups = sorted(frame.groupby(["dataset", "task", "model"]).groups)
    modes = sorted(frame["question_mode"].unique())
    methods = methods_in_order(frame["method"])
    if len(methods) > SMALL_MULTIPLES_ABOVE:
        return _quality_by_family(frame, groups, modes, methods, title, band_alpha)
    figure, axes = plt.subplots(
        len(groups), len(modes), figsize=(5.8 * len(modes), 4.4 * len(groups)), squeeze=False, sharey="row"
    )
    for r, (dataset, task, model) in enumerate(groups):
        for c, mode in enumerate(modes):
            panel = _panel_rows(frame, dataset, task, model, mode)
            ax = axes[r][c]
            _draw_quality(ax, panel, methods, band_alpha)
            ax.set_title(f"{model} · {dataset}/{task} · {_mode_label(mode)} · {_n_text(panel)}", fontsize=9)
            ax.legend(fontsize=7, loc="best", title="shaded: 95% bootstrap CI", title_fontsize=7)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return with_flagged_caption(figure, frame)


def _panel_rows(frame: pd.DataFrame, dataset: str, task: str, model: str, mode: str | None = None) -> pd.DataFrame:
    selected = (frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
    if mode is not None:
        selected &= frame["question_mode"] == mode
    return frame[selected]


def _n_text(panel: pd.DataFrame) -> str:
    n_values = sorted(set(panel["n"]))
    return f"n = {n_values[0]}" if len(n_values) == 1 else f"n = {n_values[0]}-{n_values[-1]}"


def _draw_quality(ax, panel: pd.DataFrame, methods: list[str], band_alpha: float) -> None:
    """The full cache's line and band, then each of ``methods`` the panel holds, with its band."""
    full = panel[panel["method"] == BASELINE_METHOD]
    if not full.empty:
        base = full.iloc[0]
        ax.axhline(base["score"], color=FULL_CACHE_COLOUR, linestyle="--", linewidth=1.4,
                   label=f"{method_label(BASELINE_METHOD)} (100% kept)")
        ax.axhspan(base["ci_low"], base["ci_high"], color=FULL_CACHE_COLOUR, alpha=0.08, linewidth=0)
    drawn = [m for m in methods if m in set(panel["method"])]
    lines = {m: panel[panel["method"] == m].sort_values("retention") for m in drawn}
    offsets = point_offsets(lines)
    for method, line in lines.items():
        _draw_line(ax, line, "score", "ci_low", "ci_high", method_label(method), method_style(method), band_alpha,
                   offsets.get(method, 0.0))
    metric = panel["metric"].iloc[0] if not panel.empty else "score"
    task = panel["task"].iloc[0] if not panel.empty else ""
    ax.set_xlabel("KV cache kept (% of prompt tokens)" + (", points dodged" if any(offsets.values()) else ""))
    ax.set_ylabel(_metric_axis_label(task, metric))
    ax.set_xlim(0, 105)
    ax.set_ylim(-2, 102)  # the metric's whole range: a gap is shown at its true size
    ax.grid(alpha=0.3)


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


def _draw_line(ax, line: pd.DataFrame, y: str, low: str, high: str, label: str, style: dict, band_alpha: float,
               offset: float = 0.0) -> None:
    """A method's line with its interval as a band, or, measured at one retention, its point with an error bar."""
    x = (line["retention"] * 100 + offset).to_numpy()
    if len(line) == 1:
        errors = np.vstack([(line[y] - line[low]).to_numpy(), (line[high] - line[y]).to_numpy()])
        ax.errorbar(x, line[y].to_numpy(), yerr=errors, label=label, linestyle="none", markersize=5, capsize=2.5,
                    elinewidth=1.0, **style)
        return
    ax.plot(x, line[y], label=label, linewidth=1.6, markersize=5, **style)
    ax.fill_between(x, line[low], line[high], color=style["color"], alpha=band_alpha, linewidth=0)


def _family_grid(blocks: list[list], panel_height: float = 4.2):
    """A figure with one row of panels (wrapped at PANEL_COLUMNS) per block; [[ax per item]] and the figure."""
    n_cols = min(PANEL_COLUMNS, max(len(items) for items in blocks))
    rows_of = [math.ceil(len(items) / n_cols) for items in blocks]
    figure, axes = plt.subplots(sum(rows_of), n_cols, figsize=(5.2 * n_cols, panel_height * sum(rows_of)),
                                squeeze=False, sharey=True)
    placed, row = [], 0
    for items, rows in zip(blocks, rows_of):
        cells = [axes[row + k // n_cols][k % n_cols] for k in range(rows * n_cols)]
        for ax in cells[len(items):]:
            ax.set_visible(False)
        placed.append(cells[: len(items)])
        row += rows
    return figure, placed


def _family_legend(ax, **options) -> None:
    """Under the panel, in two columns: a panel's ten lines stay readable and the data uncovered."""
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2, frameon=False, **options)


def _quality_by_family(frame, groups, modes, methods, title, band_alpha):
    blocks = [(group, mode) for group in groups for mode in modes]
    panels = {block: panels_of([m for m in methods if m in set(_panel_rows(frame, *block[0], block[1])["method"])])
              for block in blocks}
    figure, placed = _family_grid([panels[block] or [None] for block in blocks])
    for block, axes in zip(blocks, placed):
        (dataset, task, model), mode = block
        rows = _panel_rows(frame, dataset, task, model, mode)
        keys = [key for key, _ in panels[block]]
        for k, (ax, (key, members)) in enumerate(zip(axes, panels[block])):
            _draw_quality(ax, rows[rows["method"].isin([BASELINE_METHOD, *members])], members, band_alpha)
            ax.set_title(f"{panel_title(key, keys)}\n{model} · {dataset}/{task} · {_mode_label(mode)} · {_n_text(rows)}", fontsize=9)
            if k % PANEL_COLUMNS:
                ax.set_ylabel("")
            _family_legend(ax, title="whiskers or shading: 95% bootstrap CI" if k == 0 else None, title_fontsize=7)
    figure.tight_layout()
    return with_flagged_caption(title_above(figure, title), frame)


def title_above(figure, title: str | None):
    """The figure's title above its laid-out panels, at any height (``suptitle``'s default place, 2% of the
    figure's height from its top, falls inside the first row of a tall grid); the saved file holds it."""
    if title:
        figure.suptitle(title, y=1.0, va="bottom")
    return figure


def with_flagged_caption(figure, summary: pd.DataFrame):
    """The cells the figure draws that were measured other than they asked, named under it."""
    caption = flagged_caption(summary)
    if caption:
        # under the laid-out figure (the saved file's tight bounding box grows to hold it), whatever its height
        figure.text(0.01, 0.0, caption, fontsize=7, ha="left", va="top", color="firebrick")
    return figure


def paired_scatter(per_example: pd.DataFrame, title: str | None = None, point_alpha: float = 0.5,
                   max_columns: int = 4):
    """Each example's score with a method (y) against its score with full cache (x), same example.

    Points above the diagonal are examples the method answered better than the full cache. The
    counts of better/worse/tied examples are printed in each panel: ties are common (0 or 1 scores),
    so points that overlap are still counted.
    """
    frame = _one_decode_batch(per_example[per_example["batch_size"] == BASELINE_BATCH_SIZE])
    keys = ["dataset", "task", "model", "question_mode", "id"]
    baseline = frame[frame["method"] == BASELINE_METHOD][keys + ["score"]].rename(columns={"score": "full_score"})
    paired = frame[frame["method"] != BASELINE_METHOD].merge(baseline, on=keys, how="inner")
    if paired.empty:
        return _empty_figure("No examples scored with both a method and the full cache.", title)
    rows = sorted(paired.groupby(["dataset", "task", "model", "question_mode"]).groups)
    methods = [m for m in COMPRESSED_METHODS if m in set(paired["method"])] + sorted(set(paired["method"]) - set(METHODS))
    retentions = sorted(paired["retention"].unique(), reverse=True)
    n_cols = min(len(methods), max_columns)
    rows_per_group = -(-len(methods) // n_cols)
    n_rows = len(rows) * rows_per_group
    figure, axes = plt.subplots(n_rows, n_cols, figsize=(3.2 * n_cols, 3.8 * n_rows),
                                squeeze=False, sharex=True, sharey=True)
    for ax in axes.flat[len(rows) * len(methods):]:
        ax.set_visible(False)
    for g, (dataset, task, model, mode) in enumerate(rows):
        for k, method in enumerate(methods):
            r, c = g * rows_per_group + k // n_cols, k % n_cols
            ax = axes[r][c]
            cell = paired[(paired["dataset"] == dataset) & (paired["task"] == task) & (paired["model"] == model)
                          & (paired["question_mode"] == mode) & (paired["method"] == method)]
            ax.plot([0, 100], [0, 100], color="#777777", linewidth=0.8, linestyle=":")
            for j, retention in enumerate(retentions):
                points = cell[cell["retention"] == retention]
                if points.empty:
                    continue
                ax.scatter(points["full_score"] * 100, points["score"] * 100, s=16, alpha=point_alpha,
                           color=RETENTION_COLOURS[j % len(RETENTION_COLOURS)], marker=MARKERS[j % len(MARKERS)],
                           label=f"{retention:.0%} kept", edgecolors="none")
            better = int((cell["score"] > cell["full_score"]).sum())
            worse = int((cell["score"] < cell["full_score"]).sum())
            tied = len(cell) - better - worse
            ax.text(0.03, 0.97, f"better {better} · worse {worse} · tied {tied}\n(examples x retentions)", transform=ax.transAxes,
                    va="top", fontsize=7)
            metric = cell["metric"].iloc[0] if not cell.empty else "score"
            ax.set_title(f"{method_label(method)} · {_mode_label(mode)}", fontsize=9)
            if k + n_cols >= len(methods):  # bottom row of this group's panels
                ax.set_xlabel(f"Full cache: {metric} (x100)")
            if c == 0:
                ax.set_ylabel(f"{task} · method: {metric} (x100)")
            ax.set_xlim(-5, 105)
            ax.set_ylim(-5, 105)
            ax.set_aspect("equal")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="lower right")
    figure.tight_layout()
    return title_above(figure, title)


def batch_size_sensitivity(summary: pd.DataFrame, title: str | None = None):
    """Full cache at each batch size, with 95% CIs and the paired difference to batch 1 printed.

    A batch size only changes padding for the full cache, so the scores should agree within noise;
    eviction methods at batch > 1 are refused by the config check and never appear here.
    """
    frame = _complete(summary[summary["method"] == BASELINE_METHOD])
    if frame.empty or len(frame.groupby(["batch_size", "decode_batch_size"])) < 2:
        return _empty_figure(
            "Only one batch size was run for the full cache: nothing to compare.\n"
            "Set batch_size_overrides: {full_cache: [1, 4]} in the config.", title)
    groups = sorted(frame.groupby(["dataset", "task", "model", "question_mode"]).groups)
    figure, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.8), squeeze=False)
    for c, (dataset, task, model, mode) in enumerate(groups):
        ax = axes[0][c]
        panel = frame[(frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
                      & (frame["question_mode"] == mode)].sort_values(["batch_size", "decode_batch_size"])
        positions = np.arange(len(panel))
        labels = [setting_label(b, d) for b, d in zip(panel["batch_size"], panel["decode_batch_size"])]
        reference = labels[int(np.argmax(panel["diff_vs_full"].isna().to_numpy()))].replace("\n", " · ")
        errors = np.vstack([panel["score"] - panel["ci_low"], panel["ci_high"] - panel["score"]])
        ax.errorbar(positions, panel["score"], yerr=errors, fmt="o", color=FULL_CACHE_COLOUR, capsize=5,
                    label=f"{method_label(BASELINE_METHOD)} (mean, 95% CI)")
        for x, row in zip(positions, panel.itertuples()):
            text = f"n = {row.n}"
            if not pd.isna(row.diff_vs_full):
                text += f"\nΔ vs {reference}: {row.diff_vs_full:+.2f}\n[{row.diff_ci_low:+.2f}, {row.diff_ci_high:+.2f}]"
            ax.annotate(text, (x, row.ci_high), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xticks(positions, labels)
        ax.set_xlim(-0.6, len(panel) - 0.4)
        ax.set_xlabel("Prompts per batch (left-padded)")
        ax.set_ylabel(_metric_axis_label(task, panel["metric"].iloc[0]))
        low, high = panel["ci_low"].min(), panel["ci_high"].max()
        span = max(high - low, 1.0)
        ax.set_ylim(max(low - 0.2 * span, -2), high + 0.6 * span)
        ax.set_title(f"{model} · {dataset}/{task} · {_mode_label(mode)}", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, loc="lower right")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return with_flagged_caption(figure, frame)


QUESTION_MODE_STYLES = {
    "question_aware": {"color": "#0072B2", "marker": "o"},
    "question_agnostic": {"color": "#999999", "marker": "s"},
    "other_question": {"color": "#D55E00", "marker": "^"},
    "same_question": {"color": "#009E73", "marker": "D"},
}


def question_change(summary: pd.DataFrame, per_example: pd.DataFrame, title: str | None = None, band_alpha: float = 0.15,
                    seed: int = 0, n_resamples: int = 10_000):
    """Per method: its score in each question mode at each retention (top), and the paired difference
    question_aware - other_question with its 95% bootstrap interval (bottom): how much of the method's score
    was chosen for the question it was shown."""
    frame = _complete(_one_decode_batch(summary[(summary["batch_size"] == BASELINE_BATCH_SIZE) & (summary["method"] != BASELINE_METHOD)]))
    costs = question_change_cost(_one_decode_batch(per_example[per_example["batch_size"] == BASELINE_BATCH_SIZE]), seed, n_resamples)
    if frame.empty or costs.empty:
        return _empty_figure("No method ran both question_aware and other_question.", title)
    groups = sorted(costs.groupby(["dataset", "task", "model"]).groups)
    methods = methods_in_order(costs["method"])
    if len(methods) > SMALL_MULTIPLES_ABOVE:
        return _question_change_by_family(frame, costs, groups, methods, title, band_alpha)
    figure, axes = plt.subplots(2 * len(groups), len(methods), figsize=(3.4 * len(methods), 6.0 * len(groups)),
                                squeeze=False, sharex=True, gridspec_kw={"height_ratios": [3, 2] * len(groups)})
    for g, (dataset, task, model) in enumerate(groups):
        in_group = (frame["dataset"] == dataset) & (frame["task"] == task) & (frame["model"] == model)
        for c, method in enumerate(methods):
            top, bottom = axes[2 * g][c], axes[2 * g + 1][c]
            for mode, style in QUESTION_MODE_STYLES.items():
                line = frame[in_group & (frame["method"] == method) & (frame["question_mode"] == mode)].sort_values("retention")
                if line.empty:
                    continue
                x = line["retention"] * 100
                top.plot(x, line["score"], label=f"{_mode_label(mode)} (n {line['n'].min()})", linewidth=1.4, markersize=4, **style)
                top.fill_between(x, line["ci_low"], line["ci_high"], color=style["color"], alpha=band_alpha, linewidth=0)
            cost = costs[(costs["dataset"] == dataset) & (costs["task"] == task) & (costs["model"] == model) & (costs["method"] == method)]
            cost = cost.sort_values("retention")
            bottom.axhline(0, color="#777777", linewidth=0.8)
            bottom.errorbar(cost["retention"] * 100, cost["diff"], yerr=[cost["diff"] - cost["diff_ci_low"], cost["diff_ci_high"] - cost["diff"]],
                            fmt="o-", color=method_style(method)["color"], capsize=3, markersize=4)
            top.set_title(f"{method_label(method)} · {task}", fontsize=9)
            top.set_ylim(-2, 102)
            top.grid(alpha=0.3)
            top.legend(fontsize=6, loc="lower right")
            bottom.grid(alpha=0.3)
            bottom.set_xlabel("KV cache kept (% of prompt tokens)")
            if c == 0:
                top.set_ylabel(f"{model}: score (x100)")
                bottom.set_ylabel("aware - other (x100)\npaired, 95% CI")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return with_flagged_caption(figure, frame)


def _question_change_by_family(frame, costs, groups, methods, title, band_alpha):
    """Many methods: per family part, each method's paired cost of another question (aware - other) against
    the cache kept, in its own colour; each method's scores per mode are quality_vs_retention's panels."""
    panels = {group: panels_of([m for m in methods if m in set(_panel_rows(costs, *group)["method"])]) for group in groups}
    figure, placed = _family_grid([panels[group] for group in groups], panel_height=4.0)
    for group, axes in zip(groups, placed):
        dataset, task, model = group
        rows = _panel_rows(costs, dataset, task, model)
        keys = [key for key, _ in panels[group]]
        for k, (ax, (key, members)) in enumerate(zip(axes, panels[group])):
            ax.axhline(0, color="#777777", linewidth=0.8)
            lines = {m: rows[rows["method"] == m].sort_values("retention") for m in members}
            offsets = point_offsets(lines)
            for method, cost in lines.items():
                _draw_line(ax, cost, "diff", "diff_ci_low", "diff_ci_high", f"{method_label(method)} (n {cost['n_paired'].min()})",
                           method_style(method), band_alpha, offsets.get(method, 0.0))
            ax.set_title(f"{panel_title(key, keys)}\n{model} · {dataset}/{task}", fontsize=9)
            ax.set_xlabel("KV cache kept (% of prompt tokens)" + (", points dodged" if any(offsets.values()) else ""))
            ax.set_xlim(0, 105)
            ax.set_ylim(-102, 102)
            ax.grid(alpha=0.3)
            if k % PANEL_COLUMNS == 0:
                ax.set_ylabel("question-aware - other-question (x100)\npaired, 95% CI")
            _family_legend(ax, title="whiskers or shading: 95% paired bootstrap CI" if k == 0 else None, title_fontsize=7)
    figure.tight_layout()
    return with_flagged_caption(title_above(figure, title), frame)
