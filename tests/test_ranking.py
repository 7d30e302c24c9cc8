"""The ranking table: methods in order of score at each retention, with what the paired gap to full cache says."""

import pandas as pd

from kvcache_bench.analysis.ranking import ranking_markdown


def row(method, retention, score, diff=float("nan"), low=None, high=None, mode="question_aware", batch=1, incomplete=False,
        kept=None, n=40):
    return dict(dataset="longbench", task="qasper", model="llama", method=method, question_mode=mode, retention=retention,
                batch_size=batch, decode_batch_size=1, metric="qa_f1", n=n, expected_n=n, incomplete=incomplete, small_n=n < 30,
                score=score, ci_low=score - 4, ci_high=score + 4, n_paired=n, full_cache_score=50.0, diff_vs_full=diff,
                diff_ci_low=diff - 2 if low is None else low, diff_ci_high=diff + 2 if high is None else high,
                effective_retention=retention if kept is None else kept, truncated_share=0.0, context_lost=0.0,
                retention_off=kept is not None, context_cut=False)


def table_rows(markdown: str, heading: str) -> list[list[str]]:
    """The cells of the table under ``heading``, one list per row (header and rule left out)."""
    section = markdown.split(heading, 1)[1].split("\n#", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_methods_are_ranked_by_score_at_each_retention_with_ties_sharing_a_rank_and_the_gap_judged():
    summary = pd.DataFrame([
        row("full_cache", 1.0, 50.0),
        row("snapkv", 0.5, 48.0, -2.0),  # interval [-4, 0]: no detectable difference
        row("knorm", 0.5, 30.0, -20.0),
        row("tova", 0.5, 48.0, -2.0),
        row("streaming_llm", 0.5, 52.0, 2.0, low=0.5, high=3.5),
        row("snapkv", 0.1, 20.0, -30.0),
        row("knorm", 0.1, 35.0, -15.0, kept=0.3),
        row("kv_quant_2bit", 1.0, 45.0, -5.0),
        row("pyramidkv", 0.5, 60.0, 10.0, incomplete=True),  # not what the figures draw: not ranked
        row("full_cache", 1.0, 47.0, -3.0, batch=4),
    ])
    markdown = ranking_markdown(summary)
    half = table_rows(markdown, "### 50% of the KV cache kept (4 methods)")
    assert [(r[0], r[1], r[8]) for r in half] == [
        ("ref", "Full cache", ""),
        ("1", "StreamingLLM", "gain"),
        ("2", "SnapKV", "no detectable difference"),  # a tie: catalogue order, one rank
        ("2", "TOVA", "no detectable difference"),
        ("4", "Knorm", "loss"),
    ]
    assert half[1][6:8] == ["+2.00", "[0.50, 3.50]"]
    tenth = table_rows(markdown, "### 10% of the KV cache kept (2 methods)")
    assert [r[1] for r in tenth] == ["Full cache", "Knorm", "SnapKV"]
    assert tenth[1][9] == "30% (asked 10%)"  # measured other than asked, said where the rank is read
    whole = table_rows(markdown, "### Whole cache or their own budget (retention 1.0; 1 methods)")
    assert [r[1] for r in whole] == ["Full cache", "KV quant (2-bit)"]
    assert "1 incomplete cells are not ranked" in markdown and "PyramidKV" not in "".join(map(str, half + tenth))
    assert markdown.index("### 50%") < markdown.index("### 10%") < markdown.index("### Whole cache")


def test_each_question_mode_is_ranked_apart_and_small_cells_are_warned_about():
    summary = pd.DataFrame([
        row("full_cache", 1.0, 50.0, n=18), row("snapkv", 0.25, 40.0, -10.0, n=18),
        row("full_cache", 1.0, 45.0, mode="question_agnostic", n=18), row("snapkv", 0.25, 10.0, -35.0, mode="question_agnostic", n=18),
    ])
    markdown = ranking_markdown(summary, small_n=30)
    assert "## longbench / qasper / llama · question-agnostic (qa_f1 x100)" in markdown
    assert "## longbench / qasper / llama · question-aware (qa_f1 x100)" in markdown
    assert "4 of 4 cells have fewer than 30 examples" in markdown


def test_a_custom_press_is_ranked_under_its_label_and_modes_come_in_reading_order():
    summary = pd.DataFrame([
        {**row("full_cache", 1.0, 50.0), "label": "Full cache"}, {**row("value_norm", 0.5, 45.0, -5.0), "label": "Value norm"},
        {**row("full_cache", 1.0, 50.0, mode="other_question"), "label": "Full cache"},
        {**row("full_cache", 1.0, 50.0, mode="question_agnostic"), "label": "Full cache"},
    ])
    markdown = ranking_markdown(summary)
    assert [r[1:3] for r in table_rows(markdown, "### 50% of the KV cache kept (1 methods)")] == [
        ["Full cache", "baseline"], ["Value norm", "custom"]]
    headings = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert [h.split(" · ")[1].split(" ")[0] for h in headings] == ["question-aware", "question-agnostic", "other-question"]


def test_a_cell_with_no_example_to_score_is_named_not_ranked():
    """other_question on a dataset whose contexts have one question each writes n = 0 cells: the ranking once
    crashed on their missing score (IntCastingNaNError) and left the study without its tables."""
    nothing = dict(score=float("nan"), n=0)
    summary = pd.DataFrame([
        row("full_cache", 1.0, 50.0), row("snapkv", 0.5, 48.0, -2.0),
        {**row("full_cache", 1.0, 0.0, mode="other_question"), **nothing, "expected_n": 0, "small_n": False},
        {**row("snapkv", 0.5, 0.0, mode="other_question"), **nothing, "expected_n": 0, "small_n": False},
    ])
    markdown = ranking_markdown(summary)
    assert "2 cells have no example to score and are not ranked:** Full cache 100% other_question; SnapKV 50% other_question" in markdown
    assert [r[1] for r in table_rows(markdown, "### 50% of the KV cache kept (1 methods)")] == ["Full cache", "SnapKV"]
