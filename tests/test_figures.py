"""Figures: drawn from hand-made tables, readable, consistent, and honest about what they leave out."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb

from kvcache_bench.analysis.figures.batch_size import batch_size_sensitivity
from kvcache_bench.analysis.figures.paired_scatter import paired_scatter
from kvcache_bench.analysis.figures.palette import COMPRESSED_METHODS, method_family, method_style
from kvcache_bench.analysis.figures.quality_by_family import quality_by_family
from kvcache_bench.analysis.figures.quality_vs_retention import quality_vs_retention
from kvcache_bench.analysis.figures.question_change import question_change
from kvcache_bench.analysis.figures.style import save_figure
from kvcache_bench.analysis.layout import SAVE_DPI, layout_report
from kvcache_bench.analysis.versus import versus_methods
from kvcache_bench.methods.registry import METHODS


def summary_row(method, retention, score, batch_size=1, mode="question_aware", incomplete=False, n=50, diff=np.nan,
                decode=1, label=None, ci=3.0):
    return dict(dataset="longbench", task="qasper", model="llama", method=method, question_mode=mode,
                retention=retention, batch_size=batch_size, decode_batch_size=decode, metric="qa_f1", n=n, expected_n=n,
                incomplete=incomplete, small_n=n < 30, score=score, ci_low=score - ci, ci_high=score + ci,
                n_paired=n, full_cache_score=50.0, diff_vs_full=diff, diff_ci_low=diff - 1, diff_ci_high=diff + 1,
                **({"label": label} if label else {}))


@pytest.fixture(autouse=True)
def close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


@pytest.fixture
def summary():
    rows = [summary_row("full_cache", 1.0, 50.0), summary_row("full_cache", 1.0, 40.0, mode="question_agnostic")]
    for mode in ("question_agnostic", "question_aware"):  # written agnostic first: the figure orders the modes
        for method, scale in (("snapkv", 0.9), ("streaming_llm", 0.6)):
            rows += [summary_row(method, r, 50 * scale * r ** 0.2, mode=mode, diff=-5.0) for r in (0.5, 0.25, 0.1)]
    rows.append(summary_row("knorm", 0.5, 10.0, incomplete=True))
    return pd.DataFrame(rows)


def all_axes(figure) -> list[Axes]:
    """Every visible axes of a figure, its subfigures' included, in drawing order."""
    return [ax for ax in figure.findobj(Axes) if ax.get_visible()]


def figure_legend_texts(figure) -> list[str]:
    """The labels of the figure-level legends (on the figure or a subfigure), in reading order (row by row)."""
    texts = []
    for legend in figure.findobj(lambda artist: type(artist).__name__ == "Legend"):
        if legend.axes is None:
            columns = legend._ncols
            labels = [t.get_text() for t in legend.get_texts()]
            rows = -(-len(labels) // columns)
            # the legend fills column by column; read it row by row
            lengths = [len(labels) // columns + (1 if c < len(labels) % columns else 0) for c in range(columns)]
            starts = np.cumsum([0] + lengths[:-1])
            texts += [labels[starts[c] + r] for r in range(rows) for c in range(columns) if r < lengths[c]]
    return texts


def caption_of(figure) -> str:
    return "\n".join(t.get_text() for t in figure.findobj(lambda a: type(a).__name__ == "Text") if t.axes is None)


def no_layout_problems(figure):
    report = layout_report(figure)
    assert report["problems"] == [], report["problems"][:5]
    return report


def test_quality_vs_retention_has_a_panel_per_question_mode_in_reading_order_with_full_cache_as_a_line(summary):
    figure = quality_vs_retention(summary, title="t")
    axes = all_axes(figure)
    assert [ax.get_title() for ax in axes] == ["question-aware · n = 50", "question-agnostic · n = 50"]
    for ax in axes:
        assert ax.get_xlabel() == "KV cache kept (% of prompt tokens)"
        assert len(ax.collections) == 2  # a CI band (fill_between) per method drawn (Knorm: incomplete, never drawn)
        assert len(ax.patches) == 1  # and the full cache's band
        # fitted to the data: ticks at the measured retentions, not a 0-100 axis for data at 10-50
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "25", "50"] and ax.get_xlim()[1] < 60
    assert "qa_f1 x100" in axes[0].get_ylabel() and "llama" in axes[0].get_ylabel()
    low, high = axes[0].get_ylim()
    assert low <= 37.0 and high >= 53.0 and high - low < 60  # the full cache's band (37-53) inside a fitted range
    labels = figure_legend_texts(figure)
    assert labels[0] == "Full cache (100% kept, batch 1)" and labels[1:] == ["SnapKV", "StreamingLLM"]  # by mean score
    dashed = [line for line in axes[0].get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and set(dashed[0].get_ydata()) == {50.0}
    snap = next(line for line in axes[0].get_lines() if line.get_label() == "SnapKV")
    assert list(snap.get_xdata()) == [10.0, 25.0, 50.0]
    no_layout_problems(figure)


def test_each_method_keeps_its_colour_across_figures_and_colours_are_distinct():
    styles = [(method_style(m)["color"], method_style(m)["marker"]) for m in METHODS]
    assert len(set(styles)) == len(styles)  # sixty methods: the pair tells them apart
    colours = list(dict.fromkeys(colour for colour, _ in styles))
    assert method_style("full_cache")["color"] == "#000000"
    # every pair differs clearly in RGB (no two near-identical hues)
    rgb = [np.array(to_rgb(c)) for c in colours]
    assert min(np.abs(a - b).sum() for i, a in enumerate(rgb) for b in rgb[i + 1:]) > 0.2


def example_rows(method, retention, scores, mode="question_aware", dataset="d"):
    return [dict(dataset=dataset, task="qasper", model="m", question_mode=mode, batch_size=1, decode_batch_size=1,
                 id=f"ex{i}", metric="qa_f1", method=method, retention=retention, score=s) for i, s in enumerate(scores)]


def test_paired_scatter_pairs_examples_and_counts_better_worse_tied():
    rows = example_rows("full_cache", 1.0, [1.0, 1.0, 0.0, 0.5]) + example_rows("snapkv", 0.5, [1.0, 0.0, 0.5, 0.5])
    figure = paired_scatter(pd.DataFrame(rows))
    (ax,) = all_axes(figure)
    assert ax.get_title() == "SnapKV\nbetter 1 · worse 1 · tied 2"  # in the title, clear of the corner points
    offsets = ax.collections[0].get_offsets()
    assert sorted(map(tuple, np.asarray(offsets))) == [(0.0, 50.0), (50.0, 50.0), (100.0, 0.0), (100.0, 100.0)]
    assert ax.get_xlabel() == "full cache: qa_f1 x100"
    no_layout_problems(figure)


def test_paired_scatter_with_a_full_cache_that_never_varies_is_a_sentence_instead_of_columns_of_points():
    rows = example_rows("full_cache", 1.0, [1.0] * 4) + example_rows("snapkv", 0.5, [1.0, 0.0, 1.0, 0.0])
    rows += example_rows("full_cache", 1.0, [1.0, 0.0, 1.0, 0.5], dataset="e") + example_rows("snapkv", 0.5, [1.0, 0.0, 0.0, 0.5], dataset="e")
    figure = paired_scatter(pd.DataFrame(rows))
    assert len(all_axes(figure)) == 1  # dataset e's panel only
    assert "m · d/qasper: the full cache scored 100 on every example in question-aware (4 examples)" in caption_of(figure).replace("\n", " ")
    no_layout_problems(figure)


def test_batch_size_figure_compares_full_cache_batches_with_the_paired_difference(summary):
    table = pd.concat([summary, pd.DataFrame([summary_row("full_cache", 1.0, 47.5, batch_size=4, diff=-2.5)])])
    figure = batch_size_sensitivity(table)
    aware = next(ax for ax in all_axes(figure) if "question-aware" in ax.get_title())
    assert [t.get_text() for t in aware.get_xticklabels()] == ["batch 1", "batch 4"]
    assert any("Δ -2.50" in t.get_text() for t in aware.texts)
    assert "Δ: paired difference to batch 1" in aware.get_xlabel()
    no_layout_problems(figure)


def test_batch_size_figure_says_when_there_is_nothing_to_compare(summary):
    figure = batch_size_sensitivity(summary)
    assert "batch_size_overrides" in caption_of(figure) and not all_axes(figure)


def test_a_batch_size_that_changed_no_answer_is_a_sentence_not_a_panel(summary):
    same = pd.DataFrame([summary_row("full_cache", 1.0, 50.0), summary_row("full_cache", 1.0, 50.0, batch_size=4, diff=0.0)])
    same.loc[1, ["diff_ci_low", "diff_ci_high"]] = 0.0
    changed = pd.DataFrame([summary_row("full_cache", 1.0, 50.0, mode="question_agnostic"),
                            summary_row("full_cache", 1.0, 47.5, batch_size=4, diff=-2.5, mode="question_agnostic")])
    figure = batch_size_sensitivity(pd.concat([same, changed], ignore_index=True))
    assert [ax.get_title().split("\n")[1] for ax in all_axes(figure)] == ["question-agnostic"]
    assert "batch 1 and batch 4 gave the full cache the same score on every example in question-aware" in caption_of(figure).replace("\n", " ")
    no_layout_problems(figure)


def test_figures_are_written_as_png_and_svg_with_their_layout_report(summary, tmp_path):
    report = save_figure(quality_vs_retention(summary), tmp_path / "f.png", tmp_path / "f.svg")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "f.svg").read_text()
    assert "<svg" in svg and "<dc:date>" not in svg  # no timestamp: unchanged figure, unchanged file
    from matplotlib.image import imread

    height, width = imread(tmp_path / "f.png").shape[:2]
    assert (report["width_px"], report["height_px"], report["problems"]) == (width, height, [])  # what was measured is what was saved


def test_the_same_figure_saves_to_the_same_bytes_and_its_png_is_what_savefig_writes(summary, tmp_path):
    """The PNG is the canvas the layout report drew, not a third draw: the bytes savefig would have written. And
    a figure unchanged is a file unchanged, SVG included (a rerun that moves nothing leaves git clean)."""
    import matplotlib.pyplot as plt

    for name in ("a", "b"):
        save_figure(quality_vs_retention(summary), tmp_path / f"{name}.png", tmp_path / f"{name}.svg")
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()
    figure = quality_vs_retention(summary)
    layout_report(figure)
    figure.set_layout_engine("none")
    figure.savefig(tmp_path / "savefig.png", format="png", dpi=SAVE_DPI)
    plt.close(figure)
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "savefig.png").read_bytes()


def test_paired_scatter_wraps_many_methods_into_rows_of_four():
    methods = ["snapkv", "streaming_llm", "pyramidkv", "tova", "knorm", "h2o"]
    rows = example_rows("full_cache", 1.0, [0.5, 1.0])
    for method in methods:
        rows += example_rows(method, 0.5, [0.5, 1.0])
    figure = paired_scatter(pd.DataFrame(rows))
    visible = all_axes(figure)
    assert [ax.get_title().split("\n")[0] for ax in visible] == ["Knorm", "PyramidKV", "SnapKV", "StreamingLLM", "TOVA", "H2O"]  # tied: catalogue order
    assert len(figure.findobj(Axes)) == 8  # a 2 x 4 grid, the last two panels hidden
    assert all(ax.get_xlabel() for ax in visible[2:])  # every bottom-of-column panel says what x is


def test_batch_size_figure_tells_decode_batches_apart_and_finds_its_baseline_without_decode_1():
    both = pd.DataFrame([summary_row("full_cache", 1.0, 50.0), summary_row("full_cache", 1.0, 50.0, decode=16, diff=0.5),
                         summary_row("full_cache", 1.0, 47.5, batch_size=4, diff=-2.5)])
    (ax,) = all_axes(batch_size_sensitivity(both))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["batch 1", "batch 1\ndecode 16", "batch 4"]
    only_16 = pd.DataFrame([summary_row("full_cache", 1.0, 50.0, decode=16),
                            summary_row("full_cache", 1.0, 47.5, batch_size=4, diff=-2.5)])
    (ax,) = all_axes(batch_size_sensitivity(only_16))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["batch 1\ndecode 16", "batch 4"]
    assert "paired difference to batch 1 · decode 16" in ax.get_xlabel()


def test_perf_figures_colour_each_method_as_the_quality_figures_do_and_name_custom_presses():
    from kvcache_bench.perf.plots import perf_vs_retention

    rows = [dict(model="m", context_tokens=256, batch_size=1, method=method, retention=retention, itl_mean_s=0.01,
                 hardware_backend="fake", gpu_name="none") for method, retention in
            (("full_cache", 1.0), ("knorm", 0.5), ("knorm", 0.1), ("pyramidkv", 0.5), ("pyramidkv", 0.1), ("value_norm", 0.5))]
    (ax,) = perf_vs_retention(pd.DataFrame(rows), "itl", labels={"value_norm": "Value norm"}).axes
    drawn = {line.get_label(): to_rgb(line.get_color()) for line in ax.get_lines()}
    assert drawn["Knorm"] == to_rgb(method_style("knorm")["color"])
    assert drawn["PyramidKV"] == to_rgb(method_style("pyramidkv")["color"])
    assert drawn["Full cache"] == to_rgb("#000000") and drawn["Knorm"] != drawn["PyramidKV"]
    assert "Value norm" in drawn  # a custom press is drawn, under its label


def per_example_rows(method, retention, mode, scores):
    return [dict(dataset="longbench", task="qasper", model="llama", method=method, question_mode=mode, retention=retention,
                 batch_size=1, decode_batch_size=1, id=f"e{i}", metric="qa_f1", score=s) for i, s in enumerate(scores)]


def test_question_change_pairs_aware_with_each_other_mode_on_the_same_examples_per_method_and_retention():
    from kvcache_bench.analysis.aggregate import question_change_cost

    rows = per_example_rows("snapkv", 0.25, "question_aware", [1, 1, 1, 0]) + per_example_rows("snapkv", 0.25, "other_question", [0, 1, 0])
    rows += per_example_rows("snapkv", 0.25, "question_agnostic", [1, 0, 0, 0])
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
    agnostic = question_change_cost(pd.DataFrame(rows), n_resamples=2000, against="question_agnostic").set_index("method")
    assert list(agnostic.index) == ["snapkv"] and agnostic.loc["snapkv", "diff"] == 50.0  # 3 of 4 vs 1 of 4


MODES = ("question_aware", "question_agnostic", "other_question")


def question_tables(methods, retentions, aware_of=lambda k: 40.0 + 2 * k):
    """Summary and per-example rows of ``methods`` in three modes: method k scores ``aware_of(k)`` question-aware,
    20 agnostic, 10 with another question; its per-example scores make aware - other = 1/3."""
    summary = [summary_row("full_cache", 1.0, 60.0, mode=mode) for mode in MODES]
    per_example = []
    for k, method in enumerate(methods):
        for r in retentions:
            summary += [summary_row(method, r, score, mode=mode) for mode, score in zip(MODES, (aware_of(k), 20.0, 10.0))]
            per_example += per_example_rows(method, r, "question_aware", [1, 0, 1])
            per_example += per_example_rows(method, r, "question_agnostic", [0, 0, 1])
            per_example += per_example_rows(method, r, "other_question", [0, 0, 1])
    return pd.DataFrame(summary), pd.DataFrame(per_example)


def dot_panels(figure):
    """The question-mode figure's (scores, differences) axes pairs, one per retention block."""
    axes = all_axes(figure)
    return [(ax, axes[i + 1]) for i, ax in enumerate(axes) if ax.get_xlabel().endswith("in each question mode")]


def test_question_change_at_one_retention_is_a_row_per_method_with_a_dot_per_mode_sorted_by_the_aware_score():
    methods = ["snapkv", "knorm", "tova"]
    summary, per_example = question_tables(methods, [0.25], aware_of=lambda k: [30.0, 50.0, 40.0][k])
    figure = question_change(summary, per_example, title="t", n_resamples=300)
    (scores, differences), = dot_panels(figure)
    top_down = [t.get_text() for _, t in sorted(zip(scores.get_yticks(), scores.get_yticklabels()), key=lambda p: -p[0])]
    assert top_down == ["Knorm", "TOVA", "SnapKV"]  # best question-aware score at the top
    dots = [c for c in scores.containers if hasattr(c, "lines")]
    assert len(dots) == 3  # one series per question mode, each with its whiskers
    aware = next(c for c in dots if to_rgb(c.lines[0].get_color()) == to_rgb("#0072B2"))
    assert sorted(aware.lines[0].get_xdata()) == [30.0, 40.0, 50.0]
    diffs = [c for c in differences.containers if hasattr(c, "lines")]
    assert len(diffs) == 2  # aware minus agnostic, aware minus other
    assert list(diffs[0].lines[0].get_xdata()) == pytest.approx([100 / 3] * 3, abs=0.01)
    assert not any(ax.get_xlabel().startswith("KV cache kept") for ax in all_axes(figure))  # no line over one retention
    no_layout_problems(figure)


def test_question_change_over_several_retentions_adds_lines_against_the_cache_kept():
    summary, per_example = question_tables(["snapkv", "knorm"], [0.5, 0.25])
    figure = question_change(summary, per_example, n_resamples=300)
    lines = [ax for ax in all_axes(figure) if ax.get_xlabel().startswith("KV cache kept")]
    assert [ax.get_title() for ax in lines] == ["question-aware minus question-agnostic", "question-aware minus other-question"]
    snap = next(line for line in lines[1].get_lines() if line.get_label() == "SnapKV")
    assert list(snap.get_ydata()) == pytest.approx([100 / 3, 100 / 3], abs=0.01)
    assert len(dot_panels(figure)) == 2  # and a dot block per retention
    no_layout_problems(figure)


def test_question_change_stays_readable_at_forty_methods():
    forty = [m for m in COMPRESSED_METHODS if not METHODS[m].hub_data][:40]
    summary, per_example = question_tables(forty, [0.25])
    figure = question_change(summary, per_example, n_resamples=200)
    (scores, _), = dot_panels(figure)
    assert len(scores.get_yticklabels()) == 40
    report = no_layout_problems(figure)  # forty names, none over another, none under 8 pt, at most 2,400 px wide
    assert report["height_px"] / 40 >= 0.28 * 150  # at least 0.28 inch a row at the saved dpi


MANY = ["snapkv", "knorm", "tova", "streaming_llm", "adakv_snapkv", "kvzip", "chunkkv", "think", "merging_knorm", "cur",
        "critical_snapkv", "keydiff", "pyramidkv", "random", "observed_attention", "lagkv"]  # 16


def many_methods_summary(methods=MANY, retentions=(0.5, 0.25, 0.1), extra=()):
    rows = [summary_row("full_cache", 1.0, 50.0)]
    for k, method in enumerate(methods):
        rows += [summary_row(method, r, 10 + 2 * k + 40 * r, diff=-5.0) for r in retentions]
    return pd.DataFrame(rows + list(extra))


def test_the_versus_view_draws_yours_against_the_strongest_and_the_classic_baselines():
    frame = many_methods_summary()
    coloured, faint = versus_methods(frame, highlight=["full_cache", "cur"], strongest=3)
    # yours first, then by score: the three best (random, a classic baseline, scores between them) and the classics
    assert coloured == ["cur", "lagkv", "observed_attention", "random", "pyramidkv", "streaming_llm", "knorm", "snapkv"]
    assert set(faint) == set(MANY) - set(coloured) and "tova" in faint
    few = many_methods_summary(["snapkv", "knorm", "tova"])
    assert versus_methods(few, highlight=["tova"]) == (["tova", "knorm", "snapkv"], [])  # up to eight: all in colour, by score


def test_a_custom_press_is_drawn_under_its_label_on_the_same_axes_as_snapkv_and_the_full_cache():
    custom = [summary_row("value_norm", r, 30 + 10 * r, label="Value norm") for r in (0.5, 0.25, 0.1)]
    frame = many_methods_summary(extra=custom)
    frame["label"] = frame["label"].fillna(frame["method"].map(lambda m: METHODS[m].label if m in METHODS else m))
    figure = quality_vs_retention(frame, highlight={"full_cache": "Full cache", "value_norm": "Value norm"})
    (ax,) = all_axes(figure)
    drawn = {line.get_label(): line for line in ax.get_lines()}
    assert {"Value norm", "SnapKV", "Full cache (100% kept, batch 1)"} <= set(drawn)
    assert drawn["Value norm"].get_linewidth() > drawn["SnapKV"].get_linewidth()  # highlighted: bold
    builtin = {to_rgb(line.get_color()) for label, line in drawn.items() if label != "Value norm"}
    assert to_rgb(drawn["Value norm"].get_color()) not in builtin  # and in a colour no built-in method has
    legend = figure_legend_texts(figure)
    assert legend[:2] == ["Full cache (100% kept, batch 1)", "Value norm"]
    assert legend[-1].startswith("9 other methods, faint")
    faint = [line for line in ax.get_lines() if line.get_label() == "_faint"]
    assert len(faint) == 9 and all(to_rgb(line.get_color()) == to_rgb("#B8B8B8") for line in faint)
    no_layout_problems(figure)


def test_the_family_appendix_draws_every_method_in_one_panel_per_whole_family():
    figure = quality_by_family(many_methods_summary(), title="t", highlight=["full_cache"])
    panels = all_axes(figure)
    families = [ax.get_title() for ax in panels]
    assert families == ["per-head budget (2)", "chunk/block (1)", "token scorer (11)", "key channels (1)", "merging (1)"]  # unsplit
    seen = []
    for ax in panels:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels[0] == "Full cache (100% kept)"
        members = [m for m in MANY if METHODS[m].label in labels]
        assert {method_family(m) for m in members} == {ax.get_title().rsplit(" (", 1)[0]}
        pairs = [(to_rgb(line.get_color()), line.get_marker()) for line in ax.get_lines() if line.get_label() in labels[1:]]
        assert len(set(pairs)) == len(pairs)  # within a panel, no two methods share a colour and marker
        seen += members
    assert sorted(seen) == sorted(MANY)
    no_layout_problems(figure)


def test_a_methods_colour_is_the_same_in_every_figure_and_every_study():
    def colours(figure):
        return {line.get_label(): to_rgb(line.get_color()) for ax in all_axes(figure) for line in ax.get_lines()
                if not line.get_label().startswith("_")}

    few = colours(quality_vs_retention(many_methods_summary(["snapkv", "knorm", "adakv_snapkv"])))
    appendix = colours(quality_by_family(many_methods_summary()))
    for label in ("SnapKV", "Knorm", "AdaKV (SnapKV)"):
        assert few[label] == appendix[label], label
    summary, per_example = question_tables(MANY, [0.5, 0.25])
    changed = colours(question_change(summary, per_example, n_resamples=200))
    assert {label: changed[label] for label in ("SnapKV", "Knorm")} == {label: few[label] for label in ("SnapKV", "Knorm")}


def test_every_family_of_the_catalogue_has_distinct_styles():
    families = {}
    for method in COMPRESSED_METHODS:
        families.setdefault(method_family(method), []).append((method_style(method)["color"], method_style(method)["marker"]))
    assert all(len(set(styles)) == len(styles) for styles in families.values()), families


def test_a_row_whose_every_cell_scored_the_same_is_a_sentence_not_a_flat_panel():
    flat = pd.DataFrame([dict(summary_row("full_cache", 1.0, 0.0, ci=0.0), model="random-weights"),
                         dict(summary_row("snapkv", 0.5, 0.0, ci=0.0), model="random-weights")])
    figure = quality_vs_retention(pd.concat([flat, many_methods_summary(["snapkv"])], ignore_index=True))
    assert len(all_axes(figure)) == 1  # llama's row only
    assert "random-weights · longbench/qasper · question-aware: every cell (Full cache, SnapKV) scored 0" in caption_of(figure).replace("\n", " ")
    no_layout_problems(figure)


def test_the_layout_rules_catch_text_over_text_small_text_text_off_the_figure_and_a_wide_figure():
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(4, 3))
    ax.text(0.5, 0.5, "one label")
    ax.text(0.52, 0.5, "another label")
    ax.set_title("tiny", fontsize=6)
    figure.text(0.99, 0.5, "beyond the right edge")
    problems = layout_report(figure)["problems"]
    assert "text 'one label' overlaps text 'another label'" in problems
    assert "text 'tiny' at 6 pt (at least 8)" in problems
    assert "text 'beyond the right edge' runs off the figure" in problems
    wide, _ = plt.subplots(figsize=(17, 2), layout="constrained")
    assert layout_report(wide)["problems"] == ["2550 px wide at 150 dpi (at most 2400)"]
    plt.close("all")
