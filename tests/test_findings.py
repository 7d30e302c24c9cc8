"""The README's findings are written from tables: what a press 'reaching the full cache' means is its paired interval."""

import pandas as pd

from kvcache_bench.analysis.findings import needle_sentences, padding_sentences, question_change_sentences
from kvcache_bench.analysis.summary_markdown import summary_markdown


def summary_rows():
    base = dict(dataset="d", task="niah_single_2", model="m", question_mode="question_aware", batch_size=1, decode_batch_size=32,
                metric="string_match_all", n=100, expected_n=100, incomplete=False, small_n=False, ci_low=60.0, ci_high=80.0)
    return pd.DataFrame([
        {**base, "method": "full_cache", "retention": 1.0, "score": 70.0, "diff_vs_full": float("nan"),
         "diff_ci_low": float("nan"), "diff_ci_high": float("nan")},
        {**base, "method": "snapkv", "retention": 0.5, "score": 66.0, "diff_vs_full": -4.0, "diff_ci_low": -9.0, "diff_ci_high": 1.0},
        {**base, "method": "knorm", "retention": 0.5, "score": 20.0, "diff_vs_full": -50.0, "diff_ci_low": -60.0, "diff_ci_high": -40.0},
        {**base, "method": "snapkv", "retention": 0.1, "score": 10.0, "diff_vs_full": -60.0, "diff_ci_low": -70.0, "diff_ci_high": -50.0},
        {**base, "method": "knorm", "retention": 0.1, "score": 2.0, "diff_vs_full": -68.0, "diff_ci_low": -78.0, "diff_ci_high": -58.0},
    ])


def test_a_press_reaches_the_full_cache_when_its_paired_interval_reaches_zero():
    lines = needle_sentences(summary_rows())
    assert lines[0].startswith("The full cache finds 70% of the needles (n = 100")
    assert lines[1].startswith("- **50% kept**: 1 of 2 presses reaches the full cache: SnapKV 66 (−4 [−9, +1])")
    assert "Knorm" not in lines[1].split("Lowest")[0]
    assert lines[2].startswith("- **10% kept**: none of 2 reaches the full cache; the best: SnapKV 10")


def test_the_padding_sentence_gives_the_share_of_pads_the_press_kept_and_the_control():
    row = dict(task="t", retention=0.5, batch_size=4, examples=50, padded_rows=37, mean_pads_per_padded_row=698.0,
               score_batch_1=64.0, score_padded_batch=36.0)
    table = pd.DataFrame([
        {**row, "method": "snapkv", "changed_answers": 30, "diff": -28.0, "diff_ci_low": -40.0, "diff_ci_high": -16.0,
         "mean_pads_kept": 202.0, "max_pads_kept": 968.0, "share_of_pads_kept": 0.29},
        {**row, "method": "full_cache", "retention": 1.0, "changed_answers": 0, "diff": 0.0, "diff_ci_low": 0.0,
         "diff_ci_high": 0.0, "mean_pads_kept": 698.0, "max_pads_kept": 1045.0, "share_of_pads_kept": 1.0},
    ])
    first, second = padding_sentences(table)
    assert "SnapKV keeping 50% kept **29% of the pads** (202 per layer and padded row" in first
    assert "found 64% of the needles alone, 36% padded (−28 [−40, −16], 30 of 50 answers changed)" in first
    assert "Full cache (the control, which keeps every pad): +0 [+0, +0], 0 answers changed" in second


def test_the_summary_lists_every_cell_the_config_asked_for_that_did_not_run_and_why():
    summary = summary_rows().assign(n_paired=100, full_cache_score=70.0)
    not_run = [{"target": "d/t/m/kvzip/other_question/retention-0.25_batch-1_decode-32",
                "problems": ["kvzip masks slots per head, and the other_question mode removes the question"]}]
    markdown = summary_markdown(summary, not_run=not_run)
    assert "## Not run: 1 cell(s) the config asked for" in markdown
    assert "| `d/t/m/kvzip/other_question/retention-0.25_batch-1_decode-32` | kvzip masks slots per head" in markdown
    assert "Not run" not in summary_markdown(summary)


def question_rows():
    """Per-example scores of 20 questions: SnapKV loses 10 of them without the question and none with another,
    StreamingLLM answers alike in every mode."""
    base = dict(dataset="d", task="niah_multikey_1", model="m", retention=0.25, batch_size=1, decode_batch_size=32,
                metric="string_match_all")
    rows = []
    for i in range(20):
        for mode in ("question_aware", "question_agnostic", "other_question"):
            rows.append({**base, "method": "full_cache", "retention": 1.0, "question_mode": mode, "id": f"q{i}", "score": float(i < 8)})
            rows.append({**base, "method": "streaming_llm", "question_mode": mode, "id": f"q{i}", "score": float(i < 4)})
            lost = mode == "question_agnostic" and i < 5
            rows.append({**base, "method": "snapkv", "question_mode": mode, "id": f"q{i}", "score": float(i < 5 and not lost)})
    return pd.DataFrame(rows)


def test_the_question_sentences_name_the_presses_that_fell_detectably_in_each_other_mode():
    per_example = question_rows()
    summary = pd.DataFrame([
        dict(method="full_cache", question_mode=mode, retention=1.0, n=20, score=40.0, ci_low=20.0, ci_high=60.0, incomplete=False)
        for mode in ("question_aware", "question_agnostic", "other_question")
    ] + [dict(method="snapkv", question_mode="question_aware", retention=0.25, n=20, score=25.0, ci_low=5.0, ci_high=45.0,
              incomplete=False)])
    head, other, agnostic = question_change_sentences(summary, per_example, seed=0)
    assert head.startswith("With 25% kept and n = 20 per cell, the full cache finds 40% [20, 60] in every mode.")
    assert "another question chose the cache**, 0 of 2 presses fell detectably: none. 2 did not detectably move" in other
    assert "no question was seen**, 1 of 2 presses fell detectably: SnapKV 25 → 0 (+25 [" in agnostic
    assert "(StreamingLLM scored the same on every question)" in agnostic


def ruler_rows(task: str, retention: float, scores: dict[str, float], full: float) -> list[dict]:
    base = dict(dataset="ruler-4k", task=task, model="m", question_mode="question_agnostic", batch_size=1,
                decode_batch_size=32, metric="string_match_all", n=100, expected_n=100, incomplete=False,
                small_n=False, ci_low=0.0, ci_high=100.0)
    rows = [{**base, "method": "full_cache", "retention": 1.0, "score": full, "effective_retention": 1.0,
             "diff_vs_full": float("nan"), "diff_ci_low": float("nan"), "diff_ci_high": float("nan")}]
    for method, score in scores.items():
        rows.append({**base, "method": method, "retention": retention, "score": score, "effective_retention": retention,
                     "diff_vs_full": score - full, "diff_ci_low": score - full - 5, "diff_ci_high": score - full + 5})
    return rows


def test_a_retention_run_on_fewer_tasks_is_averaged_over_its_own_tasks_beside_the_others_on_the_same():
    from kvcache_bench.analysis.findings import one_mode_ruler_sentences

    # two runs' tables joined, as tools/docs.py joins Gemma 3's: 50% kept on three tasks, 75% kept on two of them;
    # each table carries the same full-cache cells
    half = [row for task, full in (("a", 90.0), ("b", 50.0), ("c", 10.0))
            for row in ruler_rows(task, 0.5, {"snapkv": full - 40, "knorm": full - 2}, full)]
    three_quarters = [row for task, full in (("a", 90.0), ("b", 50.0))
                      for row in ruler_rows(task, 0.75, {"snapkv": full - 10, "knorm": full}, full)]
    lines = one_mode_ruler_sentences(pd.DataFrame(half + three_quarters))
    assert lines[0].count("a 90") == 1 and "(mean 50)" in lines[0]  # the full cache once per task, over 3 tasks
    assert lines[1].startswith("- **75% kept**: Knorm 70 (2 of 2), SnapKV 60 (0 of 2); on 2 of the 3 tasks (a, b;")
    assert "the full cache's mean there 70" in lines[1]
    # the 50% presses on those same two tasks, so the two retentions are read on one footing
    assert lines[2] == "  - the same tasks **50% kept**: Knorm 68 (2 of 2), SnapKV 30 (0 of 2)."
    assert lines[3] == "- **50% kept**: Knorm 48 (3 of 3), SnapKV 10 (0 of 3)."
