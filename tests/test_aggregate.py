"""The table: n, mean, seeded bootstrap CI, paired gap to full cache, and visible flags."""

import json

import numpy as np
import pandas as pd
import pytest

from kvcache_bench.analysis.aggregate import bootstrap_mean_ci, build_summary
from kvcache_bench.analysis.summary_markdown import summary_markdown


def cell(method, retention=0.5, batch_size=1, mode="question_aware", task="qasper", decode=1):
    return dict(dataset="longbench", task=task, model="llama", method=method, question_mode=mode,
                retention=retention, batch_size=batch_size, decode_batch_size=decode)


def write_scores(path, scores, metric="qa_f1"):
    path.write_text("".join(json.dumps({"id": f"ex{i}", "metric": metric, "score": s}) + "\n" for i, s in scores))
    return str(path)


def scores_of(values):
    return list(enumerate(values))


def summarize(tmp_path, cells_and_scores, expected=None, seed=1, small_n=30):
    files, cells = [], []
    for k, (c, scores) in enumerate(cells_and_scores):
        files.append(write_scores(tmp_path / f"cell{k}.jsonl", scores))
        cells.append(c)
    return build_summary(files, cells, expected, seed=seed, small_n=small_n, n_resamples=2000)


def row(summary, method, batch_size=1):
    return summary[(summary["method"] == method) & (summary["batch_size"] == batch_size)].iloc[0]


def test_mean_is_x100_rounded_and_its_interval_contains_it(tmp_path):
    summary = summarize(tmp_path, [(cell("full_cache", 1.0), scores_of([1, 0, 0.5, 1 / 3]))])
    full = row(summary, "full_cache")
    assert full["n"] == 4 and full["score"] == 45.83  # (1 + 0 + .5 + .3333) / 4
    assert 0 <= full["ci_low"] < full["score"] < full["ci_high"] <= 100


def test_bootstrap_is_reproducible_from_the_seed_and_depends_on_it(tmp_path):
    values = np.random.default_rng(0).random(25)
    first = bootstrap_mean_ci(values, np.random.default_rng(7))
    assert first == bootstrap_mean_ci(values, np.random.default_rng(7))
    assert first != bootstrap_mean_ci(values, np.random.default_rng(8))
    cells = [(cell("full_cache", 1.0), scores_of(values))]
    a = summarize(tmp_path, cells, seed=3)
    b = summarize(tmp_path, cells, seed=3)
    pd.testing.assert_frame_equal(a, b)


def test_identical_scores_have_a_zero_width_interval():
    assert bootstrap_mean_ci([0.4] * 12, np.random.default_rng(0)) == pytest.approx((0.4, 0.4))


def test_difference_to_full_cache_is_paired_on_the_same_examples(tmp_path):
    # examples vary a lot, but the method loses exactly 0.1 on each: unpaired intervals overlap,
    # the paired interval is exactly -10.
    full = [0.2, 1.0] * 10
    method = [s - 0.1 for s in full]
    summary = summarize(tmp_path, [(cell("full_cache", 1.0), scores_of(full)), (cell("snapkv"), scores_of(method))])
    snap, base = row(summary, "snapkv"), row(summary, "full_cache")
    assert snap["ci_high"] > base["ci_low"]  # the unpaired intervals overlap
    assert snap["diff_vs_full"] == -10.0
    assert (snap["diff_ci_low"], snap["diff_ci_high"]) == (-10.0, -10.0)
    assert snap["n_paired"] == 20 and snap["full_cache_score"] == 60.0
    assert pd.isna(base["diff_vs_full"])  # the baseline has no difference to itself


def test_pairing_uses_only_examples_both_cells_scored(tmp_path):
    full = scores_of([1.0, 1.0, 0.0, 0.0])
    method = scores_of([1.0, 0.5])  # ex0, ex1 only
    summary = summarize(tmp_path, [(cell("full_cache", 1.0), full), (cell("tova"), method)])
    tova = row(summary, "tova")
    assert tova["n_paired"] == 2
    assert tova["full_cache_score"] == 100.0  # full cache on ex0, ex1, not its overall 50
    assert tova["diff_vs_full"] == -25.0


def test_full_cache_batch_4_is_compared_with_batch_1_and_modes_pair_separately(tmp_path):
    summary = summarize(tmp_path, [
        (cell("full_cache", 1.0), scores_of([1.0, 1.0])),
        (cell("full_cache", 1.0, batch_size=4), scores_of([1.0, 0.0])),
        (cell("full_cache", 1.0, mode="question_agnostic"), scores_of([0.0, 0.0])),
        (cell("snapkv", mode="question_agnostic"), scores_of([0.5, 0.0])),
    ])
    assert row(summary, "full_cache", batch_size=4)["diff_vs_full"] == -50.0
    assert row(summary, "snapkv")["diff_vs_full"] == 25.0  # against the agnostic full cache, not the aware one


def test_no_full_cache_means_no_difference_rather_than_a_made_up_one(tmp_path):
    summary = summarize(tmp_path, [(cell("snapkv"), scores_of([1.0, 0.0]))])
    assert pd.isna(row(summary, "snapkv")["diff_vs_full"])


def test_a_cell_missing_examples_is_flagged_in_csv_and_markdown(tmp_path):
    summary = summarize(
        tmp_path,
        [(cell("full_cache", 1.0), scores_of([1.0] * 4)), (cell("snapkv"), scores_of([1.0] * 3))],
        expected=[4, 4],
    )
    assert not row(summary, "full_cache")["incomplete"]
    assert row(summary, "snapkv")["incomplete"]
    markdown = summary_markdown(summary)
    assert "1 cells are INCOMPLETE" in markdown
    assert "SnapKV 0.50 batch 1 decode 1 (3 of 4)" in markdown
    assert "INCOMPLETE (3 of 4)" in markdown.split("| SnapKV |")[1].splitlines()[0]


def test_small_n_is_a_column_and_a_warning(tmp_path):
    summary = summarize(tmp_path, [(cell("full_cache", 1.0), scores_of([1.0] * 10))], small_n=30)
    assert bool(row(summary, "full_cache")["small_n"])
    markdown = summary_markdown(summary, small_n=30)
    assert "Warning: 1 of 1 cells have fewer than 30 examples (n = 10)" in markdown
    big = summarize(tmp_path, [(cell("full_cache", 1.0), scores_of([1.0] * 40))], small_n=30)
    assert "Warning" not in summary_markdown(big, small_n=30)


def test_markdown_names_methods_as_users_know_them(tmp_path):
    summary = summarize(tmp_path, [(cell("full_cache", 1.0), scores_of([1.0] * 3)),
                                   (cell("expected_attention", 0.25), scores_of([0.0] * 3))])
    markdown = summary_markdown(summary)
    assert "| Expected Attention (AdaKV, eps 1e-2) | question-aware | 25% | 1 | 1 | 3 | 0.00 |" in markdown
    assert "| Full cache |" in markdown


def test_an_example_scored_twice_is_an_error(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": "a", "metric": "qa_f1", "score": 1}\n{"id": "a", "metric": "qa_f1", "score": 0}\n')
    with pytest.raises(ValueError, match="scored twice"):
        build_summary([str(path)], [cell("full_cache", 1.0)])


def test_rows_start_with_full_cache_then_methods_from_most_to_least_cache_kept(tmp_path):
    summary = summarize(tmp_path, [
        (cell("snapkv", 0.1), scores_of([0.0])), (cell("snapkv", 0.5), scores_of([0.0])),
        (cell("full_cache", 1.0, batch_size=4), scores_of([0.0])), (cell("full_cache", 1.0), scores_of([0.0])),
    ])
    assert list(zip(summary["method"], summary["retention"], summary["batch_size"])) == [
        ("full_cache", 1.0, 1), ("full_cache", 1.0, 4), ("snapkv", 0.5, 1), ("snapkv", 0.1, 1)]


def test_decode_batches_are_a_column_and_find_their_full_cache(tmp_path):
    values = scores_of([1, 0, 1, 1, 0.5])
    summary = summarize(tmp_path, [(cell("full_cache", 1.0, decode=16), values), (cell("full_cache", 1.0, batch_size=4), values),
                                   (cell("knorm", 0.5, decode=16), scores_of([0, 0, 1, 1, 0.5]))])
    assert not np.isnan(row(summary, "full_cache", batch_size=4)["diff_vs_full"])  # no decode-1 baseline needed
    assert row(summary, "knorm")["diff_vs_full"] == -20.0
    markdown = summary_markdown(summary)
    assert "| batch | decode batch |" in markdown
    assert "| Full cache | question-aware | 100% | 1 | 16 |" in markdown


def test_full_cache_decoded_in_batches_is_compared_with_decoding_one_at_a_time(tmp_path):
    summary = summarize(tmp_path, [(cell("full_cache", 1.0), scores_of([1, 1, 1, 1])),
                                   (cell("full_cache", 1.0, decode=16), scores_of([1, 1, 1, 0])),
                                   (cell("knorm", 0.5, decode=16), scores_of([1, 1, 0, 0]))])
    decoded_together = summary[(summary["method"] == "full_cache") & (summary["decode_batch_size"] == 16)].iloc[0]
    assert decoded_together["diff_vs_full"] == -25.0
    assert row(summary, "knorm")["diff_vs_full"] == -25.0  # paired with full cache at the same decode batch


def table_under(markdown: str, heading: str) -> list[list[str]]:
    """The rows of the table under ``heading`` (header and rule left out), as lists of cells."""
    section = markdown.split(heading, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in rows]


def test_markdown_has_a_table_per_retention_best_first_with_the_full_cache_heading_each(tmp_path):
    summary = summarize(tmp_path, [
        (cell("full_cache", 1.0), scores_of([1, 1, 1, 1])),
        (cell("full_cache", 1.0, batch_size=4), scores_of([1, 1, 1, 0])),
        (cell("knorm", 0.5), scores_of([0, 0, 1, 1])),
        (cell("snapkv", 0.5), scores_of([1, 1, 1, 0])),
        (cell("snapkv", 0.5, mode="question_agnostic"), scores_of([0, 0, 0, 1])),
        (cell("snapkv", 0.1), scores_of([0, 0, 0, 1])),
        (cell("kv_quant_4bit", 1.0), scores_of([1, 1, 1, 1])),
    ])
    markdown = summary_markdown(summary)
    assert markdown.index("### Full cache") < markdown.index("### 50% of the KV cache kept") < markdown.index("### 10% of")
    assert markdown.index("### 10% of") < markdown.index("### Whole cache or their own budget")
    half = table_under(markdown, "### 50% of the KV cache kept (2 methods)")
    # the reference first, then SnapKV (75, before Knorm's 50) with its modes together, aware first
    assert [(r[0], r[1], r[6]) for r in half] == [
        ("Full cache", "question-aware", "100.00"), ("SnapKV", "question-aware", "75.00"),
        ("SnapKV", "question-agnostic", "25.00"), ("Knorm", "question-aware", "50.00")]
    assert [(r[0], r[3]) for r in table_under(markdown, "### Full cache")] == [("Full cache", "1"), ("Full cache", "4")]
    assert [r[0] for r in table_under(markdown, "### Whole cache")] == ["Full cache", "KV quant (4-bit)"]


def test_notes_flag_a_score_that_rises_as_less_is_kept_and_modes_far_apart_pointing_to_the_docs(tmp_path):
    ones, zeros = scores_of([1.0] * 30), scores_of([0.0] * 30)
    summary = summarize(tmp_path, [
        (cell("full_cache", 1.0), ones),
        (cell("pyramidkv", 0.5), zeros), (cell("pyramidkv", 0.1), ones),  # keeps less, scores more
        (cell("plain_expected_attention", 0.5), zeros),
        (cell("plain_expected_attention", 0.5, mode="question_agnostic"), ones),  # 100 points apart, aware below
        (cell("knorm", 0.5), scores_of([0.5] * 30)), (cell("knorm", 0.1), scores_of([0.4] * 30)),  # nothing to note
    ])
    markdown = summary_markdown(summary)
    notes = markdown.split("## Notes", 1)[1].split("\n## ", 1)[0]
    assert "**PyramidKV scores higher as it keeps less** (longbench/qasper/llama; question-aware: 0.0 at 50%, 100.0 at 10%" in notes
    assert "**Expected Attention (plain press) scores far lower question-aware than in the other modes**" in notes
    assert 'docs/canary.md, "PyramidKV keeps more when asked to keep less"' in notes
    assert 'docs/other-question.md, "A negative difference is not a gain from the other question"' in notes
    assert "Knorm" not in notes
    quiet = summarize(tmp_path, [(cell("full_cache", 1.0), ones), (cell("knorm", 0.5), ones)])
    assert "## Notes" not in summary_markdown(quiet)


def test_the_docs_the_notes_point_to_hold_the_sections_they_name():
    from pathlib import Path

    from kvcache_bench.analysis.summary_markdown import WHY

    repo = Path(__file__).resolve().parents[1]
    for why in WHY.values():
        document, section = why.rsplit("(", 1)[1].rstrip(")").split(", ", 1)
        assert section.strip('"') in (repo / document).read_text(), (document, section)


def test_a_custom_press_is_named_by_its_label_in_the_csv_and_the_markdown(tmp_path):
    files = [write_scores(tmp_path / "a.jsonl", scores_of([1, 1])), write_scores(tmp_path / "b.jsonl", scores_of([1, 0]))]
    summary = build_summary(files, [cell("full_cache", 1.0), cell("value_norm", 0.5)], n_resamples=100,
                            labels={"value_norm": "Value norm"})
    assert list(summary["label"]) == ["Full cache", "Value norm"]
    assert "| Value norm | question-aware | 50% |" in summary_markdown(summary)
    from kvcache_bench.analysis.aggregate import per_example_frame

    assert set(per_example_frame(files, [cell("full_cache", 1.0), cell("value_norm", 0.5)], {"value_norm": "Value norm"})["label"]) == {
        "Full cache", "Value norm"}


def test_cells_with_hidden_answers_are_listed_as_predictions_only(tmp_path):
    """A ZeroSCROLLS cell has predictions and no score: the table names it rather than silently leaving it out."""
    summary = summarize(tmp_path, [(cell("full_cache", 1.0), scores_of([1.0] * 3))])
    target = "zero_scrolls/qasper_zs/m/snapkv/question_aware/retention-0.50_batch-1_decode-1"
    markdown = summary_markdown(summary, predictions_only=[target])
    assert "## Predictions only: 1 cell(s) with hidden answers" in markdown and f"- `{target}`" in markdown
    assert "Predictions only" not in summary_markdown(summary)


def test_a_cell_with_no_example_to_score_says_why_in_the_summary(tmp_path):
    """other_question on contexts of one question each leaves a cell empty: summary.md says why, as ranking.md does,
    rather than a bare INCOMPLETE (0 of 3) and a nan."""
    summary = summarize(
        tmp_path,
        [(cell("full_cache", 1.0), scores_of([1.0] * 3)), (cell("snapkv", mode="other_question"), [])],
        expected=[3, 3],
    )
    line = summary_markdown(summary).split("| SnapKV |")[1].splitlines()[0]
    assert "INCOMPLETE (0 of 3)" in line
    assert "no example to score: other_question and same_question use only contexts with two or more questions" in line
