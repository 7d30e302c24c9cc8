"""Figures: drawn from hand-made tables, readable, consistent, and honest about what they leave out."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from kvcache_bench.analysis.plots import (
    batch_size_sensitivity,
    method_style,
    paired_scatter,
    quality_vs_retention,
    save_figure,
)
from kvcache_bench.methods.registry import METHODS


def summary_row(method, retention, score, batch_size=1, mode="question_aware", incomplete=False, n=50, diff=np.nan,
                decode=1):
    return dict(dataset="longbench", task="qasper", model="llama", method=method, question_mode=mode,
                retention=retention, batch_size=batch_size, decode_batch_size=decode, metric="qa_f1", n=n, expected_n=n,
                incomplete=incomplete, small_n=n < 30, score=score, ci_low=score - 3, ci_high=score + 3,
                n_paired=n, full_cache_score=50.0, diff_vs_full=diff, diff_ci_low=diff - 1, diff_ci_high=diff + 1)


@pytest.fixture
def summary():
    rows = [summary_row("full_cache", 1.0, 50.0), summary_row("full_cache", 1.0, 40.0, mode="question_agnostic")]
    for mode in ("question_aware", "question_agnostic"):
        for method, scale in (("snapkv", 0.9), ("streaming_llm", 0.6)):
            rows += [summary_row(method, r, 50 * scale * r ** 0.2, mode=mode, diff=-5.0) for r in (0.5, 0.25, 0.1)]
    rows.append(summary_row("knorm", 0.5, 10.0, incomplete=True))
    return pd.DataFrame(rows)


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_quality_vs_retention_has_a_panel_per_question_mode_with_full_cache_as_a_line(summary):
    figure = quality_vs_retention(summary, title="t")
    axes = [ax for ax in figure.axes if ax.get_legend() is not None]
    assert len(axes) == 2
    assert {ax.get_title().split(" · ")[2] for ax in axes} == {"question-aware", "question-agnostic"}
    for ax in axes:
        assert ax.get_xlabel() == "KV cache kept (% of prompt tokens)"
        assert "qa_f1 (x100" in ax.get_ylabel()
        labels = legend_texts(ax)
        assert labels[0] == "Full cache (100% kept)"
        assert {"SnapKV", "StreamingLLM"} <= set(labels)
        assert "Knorm" not in labels  # incomplete cell: never drawn
        assert len(ax.collections) == 2  # a CI band (fill_between) per method
        assert len(ax.patches) == 1  # and the full cache's band
    aware = next(ax for ax in axes if "question-aware" in ax.get_title())
    dashed = [line for line in aware.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and set(dashed[0].get_ydata()) == {50.0}
    snap = next(line for line in aware.get_lines() if line.get_label() == "SnapKV")
    assert list(snap.get_xdata()) == [10.0, 25.0, 50.0]


def test_each_method_keeps_its_colour_across_figures_and_colours_are_distinct():
    styles = [(method_style(m)["color"], method_style(m)["marker"]) for m in METHODS]
    assert len(set(styles)) == len(styles)  # sixty methods: the pair tells them apart
    colours = list(dict.fromkeys(colour for colour, _ in styles))
    assert method_style("full_cache")["color"] == "#000000"
    # every pair differs clearly in RGB (no two near-identical hues)
    rgb = [np.array(to_rgb(c)) for c in colours]
    assert min(np.abs(a - b).sum() for i, a in enumerate(rgb) for b in rgb[i + 1:]) > 0.2


def test_paired_scatter_pairs_examples_and_counts_better_worse_tied():
    rows = []
    for i, (full, snap) in enumerate([(1.0, 1.0), (1.0, 0.0), (0.0, 0.5), (0.5, 0.5)]):
        base = dict(dataset="d", task="qasper", model="m", question_mode="question_aware", batch_size=1,
                    decode_batch_size=1, id=f"ex{i}", metric="qa_f1")
        rows.append({**base, "method": "full_cache", "retention": 1.0, "score": full})
        rows.append({**base, "method": "snapkv", "retention": 0.5, "score": snap})
    figure = paired_scatter(pd.DataFrame(rows))
    (ax,) = figure.axes
    texts = [t.get_text() for t in ax.texts]
    assert "better 1 · worse 1 · tied 2\n(examples x retentions)" in texts
    offsets = ax.collections[0].get_offsets()
    assert sorted(map(tuple, np.asarray(offsets))) == [(0.0, 50.0), (50.0, 50.0), (100.0, 0.0), (100.0, 100.0)]
    assert ax.get_xlabel() == "Full cache: qa_f1 (x100)"
    assert ax.get_title().startswith("SnapKV")


def test_batch_size_figure_compares_full_cache_batches_with_the_paired_difference(summary):
    table = pd.concat([summary, pd.DataFrame([summary_row("full_cache", 1.0, 47.5, batch_size=4, diff=-2.5)])])
    figure = batch_size_sensitivity(table)
    aware = next(ax for ax in figure.axes if "question-aware" in ax.get_title())
    assert [t.get_text() for t in aware.get_xticklabels()] == ["batch 1", "batch 4"]
    assert any("Δ vs batch 1: -2.50" in t.get_text() for t in aware.texts)
    assert aware.get_xlabel() == "Prompts per batch (left-padded)"


def test_batch_size_figure_says_when_there_is_nothing_to_compare(summary):
    figure = batch_size_sensitivity(summary)
    assert any("batch_size_overrides" in t.get_text() for t in figure.axes[0].texts)


def test_figures_are_written_as_png_and_svg(summary, tmp_path):
    save_figure(quality_vs_retention(summary), tmp_path / "f.png", tmp_path / "f.svg")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "f.svg").read_text()
    assert "<svg" in svg and "<dc:date>" not in svg  # no timestamp: unchanged figure, unchanged file


def test_paired_scatter_wraps_many_methods_into_rows_of_four():
    rows = []
    methods = ["snapkv", "streaming_llm", "pyramidkv", "tova", "knorm", "h2o"]
    for method in ["full_cache", *methods]:
        rows.append(dict(dataset="d", task="qasper", model="m", question_mode="question_aware", batch_size=1,
                         decode_batch_size=1, id="ex0", metric="qa_f1", method=method, retention=1.0 if method == "full_cache" else 0.5,
                         score=0.5))
    figure = paired_scatter(pd.DataFrame(rows))
    visible = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title().split(" · ")[0] for ax in visible] == ["Knorm", "PyramidKV", "SnapKV", "StreamingLLM", "TOVA", "H2O"]  # the registry's order
    assert len(figure.axes) == 8  # a 2 x 4 grid, the last two panels hidden
    assert all(ax.get_xlabel() for ax in visible[2:])  # every bottom-of-column panel says what x is


def test_batch_size_figure_tells_decode_batches_apart_and_finds_its_baseline_without_decode_1():
    both = pd.DataFrame([summary_row("full_cache", 1.0, 50.0), summary_row("full_cache", 1.0, 50.0, decode=16, diff=0.0),
                         summary_row("full_cache", 1.0, 47.5, batch_size=4, diff=-2.5)])
    (ax,) = batch_size_sensitivity(both).axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["batch 1", "batch 1\ndecode 16", "batch 4"]
    only_16 = pd.DataFrame([summary_row("full_cache", 1.0, 50.0, decode=16),
                            summary_row("full_cache", 1.0, 47.5, batch_size=4, diff=-2.5)])
    (ax,) = batch_size_sensitivity(only_16).axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["batch 1\ndecode 16", "batch 4"]
    assert any("Δ vs batch 1 · decode 16: -2.50" in t.get_text() for t in ax.texts)


def test_perf_figures_colour_each_method_as_the_quality_figures_do():
    from kvcache_bench.perf.plots import perf_vs_retention

    rows = [dict(model="m", context_tokens=256, batch_size=1, method=method, retention=retention, itl_mean_s=0.01,
                 hardware_backend="fake", gpu_name="none") for method, retention in
            (("full_cache", 1.0), ("knorm", 0.5), ("knorm", 0.1), ("pyramidkv", 0.5), ("pyramidkv", 0.1))]
    (ax,) = perf_vs_retention(pd.DataFrame(rows), "itl").axes
    drawn = {line.get_label(): to_rgb(line.get_color()) for line in ax.get_lines()}
    assert drawn["Knorm"] == to_rgb(method_style("knorm")["color"])
    assert drawn["PyramidKV"] == to_rgb(method_style("pyramidkv")["color"])
    assert drawn["Full cache"] == to_rgb("#000000") and drawn["Knorm"] != drawn["PyramidKV"]


def per_example_rows(method, retention, mode, scores):
    return [dict(dataset="longbench", task="qasper", model="llama", method=method, question_mode=mode, retention=retention,
                 batch_size=1, decode_batch_size=1, id=f"e{i}", metric="qa_f1", score=s) for i, s in enumerate(scores)]


def test_question_change_pairs_aware_and_other_on_the_same_examples_per_method_and_retention():
    from kvcache_bench.analysis.aggregate import question_change_cost

    rows = per_example_rows("snapkv", 0.25, "question_aware", [1, 1, 1, 0]) + per_example_rows("snapkv", 0.25, "other_question", [0, 1, 0])
    rows += per_example_rows("knorm", 0.25, "question_aware", [1, 0, 1]) + per_example_rows("knorm", 0.25, "other_question", [1, 0, 1])
    rows += per_example_rows("full_cache", 1.0, "question_aware", [1, 1, 1]) + per_example_rows("full_cache", 1.0, "other_question", [1, 1, 1])
    costs = question_change_cost(pd.DataFrame(rows), n_resamples=2000).set_index("method")
    assert "full_cache" not in costs.index
    snap = costs.loc["snapkv"]
    assert snap["n_paired"] == 3  # e3 has no other-question score: not paired
    assert snap["diff"] == pytest.approx(100 * 2 / 3, abs=0.01) and snap["aware_score"] == 100.0
    assert snap["diff_ci_low"] <= snap["diff"] <= snap["diff_ci_high"]
    knorm = costs.loc["knorm"]
    assert knorm["diff"] == knorm["diff_ci_low"] == knorm["diff_ci_high"] == 0.0


def test_question_change_figure_has_a_score_and_a_difference_panel_per_method():
    from kvcache_bench.analysis.plots import question_change

    modes = ("question_aware", "question_agnostic", "other_question")
    summary = pd.DataFrame([summary_row(m, r, 40.0 + 10 * k, mode=mode) for m in ("snapkv", "knorm") for r in (0.5, 0.25)
                            for k, mode in enumerate(modes)])
    per_example = pd.DataFrame([row for m in ("snapkv", "knorm") for r in (0.5, 0.25) for mode in ("question_aware", "other_question")
                                for row in per_example_rows(m, r, mode, [1, 0, 1] if mode == "question_aware" else [0, 0, 1])])
    figure = question_change(summary, per_example, title="t", n_resamples=500)
    tops = [ax for ax in figure.axes if ax.get_legend() is not None]
    from kvcache_bench.analysis.plots import COMPRESSED_METHODS

    in_registry_order = [m for m in COMPRESSED_METHODS if m in ("snapkv", "knorm")]  # one order across every figure
    assert [ax.get_title().split(" · ")[0] for ax in tops] == [{"snapkv": "SnapKV", "knorm": "Knorm"}[m] for m in in_registry_order]
    assert all(len(ax.get_lines()) == 3 for ax in tops)  # a line per question mode
    bottoms = [ax for ax in figure.axes if "aware - other" in ax.get_ylabel() or ax.get_xlabel().startswith("KV cache kept")]
    assert len(bottoms) == 2
    difference = next(line for line in bottoms[0].get_lines() if line.get_marker() == "o")  # not the zero line
    assert list(difference.get_ydata()) == pytest.approx([100 / 3, 100 / 3], abs=0.01)


MANY = ["snapkv", "knorm", "tova", "streaming_llm", "adakv_snapkv", "kvzip", "chunkkv", "think", "merging_knorm", "cur",
        "critical_snapkv", "keydiff", "pyramidkv", "random", "observed_attention", "lagkv"]  # 16: more than one panel holds


def many_methods_summary(methods=MANY, retentions=(0.5, 0.25, 0.1)):
    rows = [summary_row("full_cache", 1.0, 50.0)]
    for k, method in enumerate(methods):
        rows += [summary_row(method, r, 10 + 2 * k + 40 * r, diff=-5.0) for r in retentions]
    return pd.DataFrame(rows)


def drawn_colours(figure) -> dict[str, tuple]:
    """Each labelled method's colour as drawn, over every panel of the figure."""
    colours = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                colours.setdefault(line.get_label().split(" (n ")[0], to_rgb(line.get_color()))
    return colours


def test_many_methods_draw_one_panel_per_family_part_each_with_the_full_cache():
    from kvcache_bench.methods.registry import METHODS

    figure = quality_vs_retention(many_methods_summary(), title="t")
    panels = [ax for ax in figure.axes if ax.get_visible()]
    families = [ax.get_title().split("\n")[0] for ax in panels]
    assert families == ["per-head budget", "chunk/block", "token scorer (1 of 2)", "token scorer (2 of 2)", "key channels", "merging"]
    label_to_method = {METHODS[m].label: m for m in MANY}
    seen = []
    for ax, family in zip(panels, families):
        labels = legend_texts(ax)
        assert labels[0] == "Full cache (100% kept)"  # every panel keeps the reference
        members = [label_to_method[label] for label in labels[1:]]
        assert {METHODS[m].family for m in members} == {family.split(" (")[0]} and len(members) <= 10
        colours = [to_rgb(line.get_color()) for line in ax.get_lines() if line.get_label() in labels[1:]]
        assert len(set(colours)) == len(colours)  # within a panel, no two methods share a colour
        seen += members
    assert sorted(seen) == sorted(MANY)  # each method drawn once


def test_a_methods_colour_is_the_same_in_every_figure_and_every_study():
    few = drawn_colours(quality_vs_retention(many_methods_summary(["snapkv", "knorm", "adakv_snapkv"])))
    many = drawn_colours(quality_vs_retention(many_methods_summary()))
    assert len(many) == len(MANY) + 1
    for label in ("SnapKV", "Knorm", "AdaKV (SnapKV)", "Full cache (100% kept)"):
        assert few[label] == many[label], label
    from kvcache_bench.analysis.plots import question_change

    modes = ("question_aware", "other_question")
    summary = pd.DataFrame([summary_row(m, r, 40.0, mode=mode) for m in MANY for r in (0.5, 0.25) for mode in modes])
    per_example = pd.DataFrame([row for m in MANY for r in (0.5, 0.25) for mode in modes
                                for row in per_example_rows(m, r, mode, [1, 0, 1] if mode == "question_aware" else [0, 0, 1])])
    changed = drawn_colours(question_change(summary, per_example, n_resamples=200))
    assert {label: changed[label] for label in ("SnapKV", "Knorm", "AdaKV (SnapKV)")} == {
        label: many[label] for label in ("SnapKV", "Knorm", "AdaKV (SnapKV)")}


def test_every_family_part_of_the_catalogue_has_distinct_colours():
    from kvcache_bench.analysis.plots import COMPRESSED_METHODS, method_panel

    parts = {}
    for method in COMPRESSED_METHODS:
        parts.setdefault(method_panel(method), []).append(method_style(method)["color"])
    assert all(len(set(colours)) == len(colours) <= 10 for colours in parts.values()), parts


def test_many_methods_question_change_draws_each_methods_paired_cost_in_its_family_panel():
    from kvcache_bench.analysis.plots import question_change

    modes = ("question_aware", "other_question")
    summary = pd.DataFrame([summary_row(m, 0.25, 40.0, mode=mode) for m in MANY for mode in modes])
    per_example = pd.DataFrame([row for m in MANY for mode in modes
                                for row in per_example_rows(m, 0.25, mode, [1, 1, 1] if mode == "question_aware" else [0, 1, 1])])
    figure = question_change(summary, per_example, n_resamples=200)
    panels = [ax for ax in figure.axes if ax.get_visible()]
    assert panels[0].get_title().startswith("per-head budget\n")
    snap_panel = next(ax for ax in panels if "SnapKV (n 3)" in legend_texts(ax))
    (snap,) = [bars for bars in snap_panel.containers if bars.get_label() == "SnapKV (n 3)"]  # one retention: a point, its whiskers
    assert list(snap.lines[0].get_ydata()) == pytest.approx([100 / 3], abs=0.01)
    assert to_rgb(snap.lines[0].get_color()) == to_rgb(method_style("snapkv")["color"])
    assert snap_panel.get_xlabel().endswith("points dodged")  # several methods at one x are moved apart
