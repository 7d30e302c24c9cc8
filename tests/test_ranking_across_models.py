"""Does the ranking hold? A press's rank on one model against another's: what is pooled, the rank correlations and
their bootstrap intervals (on tables where the right answer is known), the refusals, and the committed SmolLM2 runs
compared with themselves as a smoke test (kvcache_bench/analysis/ranking_across_models.py).

Every test here is in-process (unit); the rule over the committed tables is tests/test_ranking_across_models_workflow.py.
"""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from kvcache_bench.analysis import ranking_across_models as across
from kvcache_bench.analysis.ranking_across_models import (
    Comparison,
    ComparisonError,
    RunTables,
    Side,
    compare,
    compare_all,
    kendall_tau_b,
    parse_comparisons,
    ranking_across_models_markdown,
    read_committed_tables,
    read_comparisons,
    runs_of,
    spearman_rho,
)
from kvcache_bench.escaping import markdown_text

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference"


# ----------------------------------------------------------------------------- synthetic tables


def tables(cells: dict, model: str = "m", metric: str = "string_match_all", incomplete: set = frozenset()) -> RunTables:
    """A run's summary and per-example tables from {(dataset, task, method, mode, retention): [scores]}, as the
    aggregate job writes them (score x100 rounded to 2 decimals; full cache at retention 1.0)."""
    summary, examples = [], []
    for (dataset, task, method, mode, retention), scores in cells.items():
        cell = dict(dataset=dataset, task=task, model=model, method=method, question_mode=mode, retention=retention,
                    batch_size=1, decode_batch_size=32)
        label = method.replace("_", " ").title() if method.startswith("my_") else across.method_label(method)
        examples += [dict(cell, label=label, id=f"{dataset}-{task}-{i}", metric=metric, score=float(s))
                     for i, s in enumerate(scores)]
        n = len(scores)
        summary.append(dict(cell, label=label, metric=metric, n=n, expected_n=n + ((dataset, task, method) in incomplete),
                            incomplete=(dataset, task, method) in incomplete, small_n=n < 30,
                            score=round(100 * float(np.mean(scores)), 2) if n else math.nan))
    return RunTables(pd.DataFrame(summary), pd.DataFrame(examples))


def side(run, **settings) -> Side:
    return Side(label=settings.pop("label", run), model=settings.pop("model", "m"), runs=(run,), **settings)


def one_task(scores: dict[str, list[float]], mode="question_aware", retention=0.5, dataset="d", task="t") -> dict:
    return {(dataset, task, method, mode, retention): values for method, values in scores.items()}


def constant(value: float, n: int = 20) -> list[float]:
    return [value] * n


PRESSES = ["snapkv", "streaming_llm", "knorm", "tova", "keydiff"]


# ----------------------------------------------------------------------------- the statistics


def test_rho_and_tau_agree_with_scipy_on_rows_with_ties():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(200, 7)).astype(float)  # few values: many ties
    y = rng.integers(0, 4, size=(200, 7)).astype(float)
    rho, tau = spearman_rho(x, y), kendall_tau_b(x, y)
    for i in range(len(x)):
        expected_rho, expected_tau = stats.spearmanr(x[i], y[i])[0], stats.kendalltau(x[i], y[i])[0]
        if np.isnan(expected_rho):  # one side all tied: scipy has no correlation, nor do we
            assert np.isnan(rho[i]) and np.isnan(tau[i])
        else:
            assert rho[i] == pytest.approx(expected_rho, abs=1e-12) and tau[i] == pytest.approx(expected_tau, abs=1e-12)


def test_ranks_are_one_for_the_best_and_ties_share_their_mean_rank():
    assert across.average_ranks([50.0, 70.0, 50.0, 10.0]).tolist() == [2.5, 1.0, 2.5, 4.0]
    # scores equal up to float noise (two orders of summation) still tie
    assert across.average_ranks([0.1 + 0.2, 0.3]).tolist() == [1.5, 1.5]


def identical_rows(a: dict, b: dict, **comparison) -> tuple[pd.DataFrame, pd.DataFrame]:
    tables_ = {"ra": tables(a), "rb": tables(b)}
    made = Comparison("c", "c", side("ra"), side("rb"), **comparison)
    return compare(made, tables_, seed=7, n_resamples=2000)


def test_identical_orders_give_one_and_reversed_orders_minus_one_with_intervals_that_cannot_move():
    # every example of a press scores alike: resampling cannot change a mean, so the interval is the point itself
    values = {m: constant(v) for m, v in zip(PRESSES, (0.9, 0.7, 0.5, 0.3, 0.1))}
    reversed_ = {m: constant(v) for m, v in zip(PRESSES, (0.1, 0.3, 0.5, 0.7, 0.9))}
    same = identical_rows(one_task(values), one_task(values))[0].iloc[0]
    assert (same["spearman_rho"], same["spearman_ci_low"], same["spearman_ci_high"]) == (1.0, 1.0, 1.0)
    assert (same["kendall_tau"], same["kendall_ci_low"], same["kendall_ci_high"]) == (1.0, 1.0, 1.0)
    opposite, presses = identical_rows(one_task(values), one_task(reversed_))
    row = opposite.iloc[0]
    assert (row["spearman_rho"], row["spearman_ci_low"], row["spearman_ci_high"]) == (-1.0, -1.0, -1.0)
    assert row["kendall_tau"] == -1.0 and row["n_presses"] == 5
    assert presses.set_index("method")["rank_change"].to_dict() == {
        "snapkv": 4.0, "streaming_llm": 2.0, "knorm": 0.0, "tova": -2.0, "keydiff": -4.0}


def test_a_constructed_case_matches_scipy():
    rng = np.random.default_rng(3)
    a = {m: rng.integers(0, 2, 40).tolist() for m in PRESSES + ["random"]}
    b = {m: rng.integers(0, 2, 40).tolist() for m in PRESSES + ["random"]}
    a["tova"] = a["knorm"]  # a tie on A
    row = identical_rows(one_task(a), one_task(b))[0].iloc[0]
    order = PRESSES + ["random"]
    mean_a, mean_b = [np.mean(a[m]) for m in order], [np.mean(b[m]) for m in order]
    assert row["spearman_rho"] == pytest.approx(stats.spearmanr(mean_a, mean_b)[0], abs=1e-12)
    assert row["kendall_tau"] == pytest.approx(stats.kendalltau(mean_a, mean_b)[0], abs=1e-12)
    assert row["spearman_ci_low"] <= row["spearman_ci_high"] and -1 <= row["spearman_ci_low"]


def three_presses_with_one_uncertain(ones: int) -> pd.Series:
    """A: 0.9 > 0.5 > 0.1 on every example (ranks fixed). B: SnapKV 0.6 and Knorm 0.0 on every example, and
    StreamingLLM right on `ones` of 20: its resampled mean passes SnapKV's (rho 0.5) with a binomial's probability."""
    a = {"snapkv": constant(0.9), "streaming_llm": constant(0.5), "knorm": constant(0.1)}
    b = {"snapkv": constant(0.6), "streaming_llm": [1.0] * ones + [0.0] * (20 - ones), "knorm": constant(0.0)}
    return identical_rows(one_task(a), one_task(b))[0].iloc[0]


def test_the_interval_comes_from_resampling_each_cells_examples():
    # 11 of 20 right: a resample has 13+ right (mean > 0.6, StreamingLLM above SnapKV: rho 0.5) with probability
    # P(Binomial(20, 0.55) >= 13) = 0.25, so the 2.5% end is 0.5; the order holds (rho 1) more than 2.5% of the time
    assert stats.binom.sf(12, 20, 0.55) == pytest.approx(0.252, abs=0.001)
    row = three_presses_with_one_uncertain(11)
    assert (row["spearman_rho"], row["spearman_ci_low"], row["spearman_ci_high"]) == (1.0, 0.5, 1.0)
    # 6 of 20 right: the swap or a tie happens with probability 0.005, under 2.5%: the interval is [1, 1]
    assert stats.binom.sf(11, 20, 0.3) + stats.binom.pmf(0, 20, 0.3) < 0.01
    row = three_presses_with_one_uncertain(6)
    assert (row["spearman_rho"], row["spearman_ci_low"], row["spearman_ci_high"]) == (1.0, 1.0, 1.0)


def test_the_interval_is_reproducible_from_the_seed_and_moves_with_it():
    rng = np.random.default_rng(5)
    a = one_task({m: rng.integers(0, 2, 30).tolist() for m in PRESSES})
    b = one_task({m: rng.integers(0, 2, 30).tolist() for m in PRESSES})
    made = Comparison("c", "c", side("ra"), side("rb"))
    first = compare(made, {"ra": tables(a), "rb": tables(b)}, seed=7, n_resamples=500)[0]
    again = compare(made, {"ra": tables(a), "rb": tables(b)}, seed=7, n_resamples=500)[0]
    other = compare(made, {"ra": tables(a), "rb": tables(b)}, seed=8, n_resamples=500)[0]
    pd.testing.assert_frame_equal(first, again)
    assert first["seed"].iloc[0] == 7 and first["n_resamples"].iloc[0] == 500
    assert first["spearman_rho"].iloc[0] == other["spearman_rho"].iloc[0]  # the point does not depend on the seed
    assert (first["spearman_ci_low"].iloc[0], first["spearman_ci_high"].iloc[0]) != (
        other["spearman_ci_low"].iloc[0], other["spearman_ci_high"].iloc[0])


# ----------------------------------------------------------------------------- what is pooled and joined


def test_a_press_scores_the_mean_over_task_names_each_length_averaged_first_and_the_full_cache_is_not_ranked():
    # A ran task t at two lengths (d1k, d2k) and task u at one; B ran both at one length (d4k)
    a, b = {}, {}
    for offset, method in enumerate(PRESSES):
        a |= one_task({method: constant(0.1 * offset)}, dataset="d1k", task="t")
        a |= one_task({method: constant(0.1 * offset + 0.2)}, dataset="d2k", task="t")
        a |= one_task({method: constant(0.5)}, dataset="d1k", task="u")
        b |= one_task({method: constant(0.05 * offset)}, dataset="d4k", task="t")
        b |= one_task({method: constant(0.3)}, dataset="d4k", task="u")
    a |= one_task({"full_cache": constant(0.8)}, dataset="d1k", task="t", retention=1.0)
    a |= one_task({"full_cache": constant(0.6)}, dataset="d2k", task="t", retention=1.0)
    a |= one_task({"full_cache": constant(1.0)}, dataset="d1k", task="u", retention=1.0)
    correlations, presses = identical_rows(a, b)
    row = correlations.iloc[0]
    assert row["tasks"] == "t, u" and row["a_cells"] == "d1k/t, d2k/t, d1k/u" and row["b_cells"] == "d4k/t, d4k/u"
    scores = presses.set_index("method")
    # knorm (offset 2): A = mean(mean(20, 40), 50) = 40; B = mean(10, 30) = 20
    assert scores.loc["knorm", "a_score"] == pytest.approx(40.0) and scores.loc["knorm", "b_score"] == pytest.approx(20.0)
    assert "full_cache" not in scores.index and row["n_presses"] == 5
    assert row["a_full_cache_score"] == pytest.approx(85.0)  # mean(mean(80, 60), 100): shown for scale
    assert math.isnan(row["b_full_cache_score"])
    assert row["a_retention"] == row["b_retention"] == 0.5  # retention 1.0 is no setting to compare at


def test_settings_are_joined_where_both_ran_them_or_as_declared():
    cells = {}
    for mode in ("question_aware", "question_agnostic"):
        for retention in (0.5, 0.25):
            cells |= one_task({m: constant(v) for m, v in zip(PRESSES, (0.9, 0.7, 0.5, 0.3, 0.1))}, mode, retention)
    b = {k: v for k, v in cells.items() if k[4] == 0.5}  # B ran 50% only
    correlations, _ = identical_rows(cells, b)
    assert list(zip(correlations["a_retention"], correlations["a_question_mode"])) == [
        (0.5, "question_aware"), (0.5, "question_agnostic")]
    made = Comparison("c", "c", side("ra", question_mode="question_aware", retention=0.5),
                      side("rb", question_mode="question_agnostic", retention=0.25))
    [row] = compare(made, {"ra": tables(cells), "rb": tables(cells)}, 1, 200)[0].to_dict("records")
    assert (row["a_retention"], row["a_question_mode"], row["b_retention"], row["b_question_mode"]) == (
        0.5, "question_aware", 0.25, "question_agnostic")


def test_presses_incomplete_or_missing_on_a_side_are_left_out_and_named():
    a = one_task({m: constant(0.5 + 0.05 * i) for i, m in enumerate(PRESSES + ["random"])})
    b = one_task({m: constant(0.1 * i) for i, m in enumerate(PRESSES)})  # no random on B
    tables_ = {"ra": tables(a, incomplete={("d", "t", "keydiff")}), "rb": tables(b)}
    row = compare(Comparison("c", "c", side("ra"), side("rb")), tables_, 1, 200)[0].iloc[0]
    assert row["n_presses"] == 4 and set(row["presses"].split(", ")) == {"snapkv", "streaming_llm", "knorm", "tova"}
    assert row["left_out"] == "keydiff (A: d/t incomplete (20 of 21)); random (B: not run)"
    # a cell with nothing to score (other_question on contexts of one question each) is said so, not "incomplete"
    tables_["rb"] = tables(b | one_task({"random": []}))
    row = compare(Comparison("c", "c", side("ra"), side("rb")), tables_, 1, 200)[0].iloc[0]
    assert row["left_out"] == "keydiff (A: d/t incomplete (20 of 21)); random (B: d/t has no example scored)"


def test_fewer_than_three_presses_in_both_is_refused_naming_the_runs():
    a = one_task({m: constant(0.1 * i) for i, m in enumerate(PRESSES)})
    b = one_task({"snapkv": constant(0.3), "knorm": constant(0.1), "random": constant(0.2)})
    with pytest.raises(ComparisonError) as refused:
        compare(Comparison("c", "c", side("run-a"), side("run-b")), {"run-a": tables(a), "run-b": tables(b)}, 1, 200)
    message = str(refused.value)
    assert "comparison 'c': 2 presses with complete cells in both (knorm, snapkv)" in message  # catalogue order
    assert "(runs run-a, model m)" in message and "(runs run-b, model m)" in message and "needs 3 or more" in message


def test_a_cell_in_two_runs_of_a_side_counts_once_and_copies_that_differ_are_refused():
    pressed = one_task({m: constant(0.1 * i) for i, m in enumerate(PRESSES)})
    full = one_task({"full_cache": constant(0.9)}, retention=1.0)
    slices = {"s50": tables(pressed | full), "s25": tables({(*k[:4], 0.25): v for k, v in pressed.items()} | full)}
    both = Side("A", "m", ("s50", "s25"))
    correlations, presses = compare(Comparison("c", "c", both, both), slices, 1, 200)
    assert correlations["a_retention"].tolist() == [0.5, 0.25]
    assert correlations["a_full_cache_score"].tolist() == pytest.approx([90.0, 90.0])
    # the same numbers as with the full cache in one slice only
    alone = {"s50": slices["s50"], "s25": tables({(*k[:4], 0.25): v for k, v in pressed.items()})}
    pd.testing.assert_frame_equal(compare(Comparison("c", "c", both, both), alone, 1, 200)[0], correlations)
    slices["s25"] = tables({(*k[:4], 0.25): v for k, v in pressed.items()}
                           | one_task({"full_cache": constant(0.8)}, retention=1.0))
    with pytest.raises(ComparisonError, match="is in runs s50 and s25 with different scores"):
        compare(Comparison("c", "c", both, both), slices, 1, 200)


def test_a_summary_that_is_not_its_per_example_tables_is_refused():
    run = tables(one_task({m: constant(0.1 * i) for i, m in enumerate(PRESSES)}))
    run.summary.loc[run.summary["method"] == "tova", "score"] += 1.0
    with pytest.raises(ComparisonError, match="summary.csv and per_example.csv disagree on d/t/m/tova"):
        compare(Comparison("c", "c", side("r"), side("r")), {"r": run}, 1, 200)


def test_a_dataset_or_model_the_runs_do_not_have_is_refused_naming_what_they_have():
    run = {"r": tables(one_task({m: constant(0.1 * i) for i, m in enumerate(PRESSES)}, dataset="ruler-1k"))}
    misspelt = Side("A", "m", ("r",), ("ruler-1k", "ruler-4K"))
    with pytest.raises(ComparisonError, match="runs r have no dataset ruler-4K for model m; their datasets: ruler-1k"):
        compare(Comparison("c", "c", misspelt, side("r")), run, 1, 200)
    with pytest.raises(ComparisonError, match="run r has no model 'gemma'; its models: m"):
        compare(Comparison("c", "c", side("r", model="gemma"), side("r")), run, 1, 200)


def test_a_task_name_scored_with_another_metric_on_each_side_is_refused():
    a = tables(one_task({m: constant(0.1 * i) for i, m in enumerate(PRESSES)}))
    b = tables(one_task({m: constant(0.1 * i) for i, m in enumerate(PRESSES)}), metric="qa_f1")
    with pytest.raises(ComparisonError, match="task t is scored with string_match_all on A and qa_f1 on B"):
        compare(Comparison("c", "c", side("ra"), side("rb")), {"ra": a, "rb": b}, 1, 200)


# ----------------------------------------------------------------------------- the declaration


def declared(**changes) -> dict:
    entry = {"name": "x", "a": {"model": "m", "runs": ["ra"]}, "b": {"model": "m", "runs": ["rb"]}}
    for key, value in changes.items():
        if value is None:
            entry.pop(key)
        else:
            entry[key] = value
    return {"comparisons": [entry]}


@pytest.mark.parametrize("changes, message", [
    ({"colour": "red"}, "comparison 'x': unknown key(s) colour; the keys are a, b, name, readme, tasks, title"),
    ({"a": {"model": "m", "runs": ["ra"], "question_mode": "question_aware"}},
     "question_mode is fixed on one side only; fix it on both"),
    ({"a": {"model": "m", "runs": ["ra"], "question_mode": "aware"}, "b": {"model": "m", "runs": ["rb"], "question_mode": "aware"}},
     "comparison 'x'.a.question_mode is 'aware'; the modes are question_aware"),
    ({"a": {"model": "m", "runs": "ra"}}, "comparison 'x'.a.runs must be a non-empty list of names, got 'ra'"),
    ({"a": {"model": "m", "runs": ["../elsewhere"]}}, "give a run's folder name under reference/"),
    ({"b": None}, "comparison 'x' has no side b"),
    ({"a": {"model": "m", "runs": ["ra"], "retention": 1.5}, "b": {"model": "m", "runs": ["rb"], "retention": 0.5}},
     "a.retention must be a share of the cache kept in (0, 1], got 1.5"),
])
def test_a_declaration_that_cannot_be_read_is_refused_naming_the_file_and_key(changes, message):
    with pytest.raises(ComparisonError) as refused:
        parse_comparisons(declared(**changes), "reference/ranking-across-models.yaml")
    assert str(refused.value).startswith("reference/ranking-across-models.yaml: ") and message in str(refused.value)


def test_the_declaration_travels_through_the_rules_params_unchanged(tmp_path):
    comparisons = read_comparisons(REFERENCE / "ranking-across-models.yaml")
    assert across.comparisons_from_params([c.as_params() for c in comparisons]) == comparisons
    assert read_comparisons(tmp_path / "absent.yaml") == []  # a checkout without reference/ declares nothing
    twice = {"comparisons": declared()["comparisons"] * 2}
    with pytest.raises(ComparisonError, match="comparison 'x' is declared twice"):
        parse_comparisons(twice)


# ----------------------------------------------------------------------------- Markdown


def test_labels_are_escaped_so_the_tables_keep_their_columns():
    hostile = "my_press"  # a custom press: its label comes from the table
    values = {m: constant(0.1 * (i + 1)) for i, m in enumerate(PRESSES[:3] + [hostile])}
    run = tables(one_task(values))
    run.summary.loc[run.summary["method"] == hostile, "label"] = "A|B *bold* <b>x</b> [link](y) `c`"
    run.per_example.loc[run.per_example["method"] == hostile, "label"] = "A|B *bold* <b>x</b> [link](y) `c`"
    made = Comparison("c", "Title with | and _under_", side("r"), side("r"))
    markdown = ranking_across_models_markdown(*compare(made, {"r": run}, 1, 200))
    assert "## Title with \\| and \\_under\\_" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| A"))
    assert row.startswith("| A\\|B \\*bold\\* \\<b\\>x\\</b\\> \\[link\\](y) \\`c\\` | 40.00 | 1 |")
    unescaped_bars = [line.replace("\\|", "").count("|") for line in markdown.splitlines() if line.startswith("| ")]
    assert set(unescaped_bars) == {7, 8}  # 6 columns per press table, 7 per correlation table: no cell split
    assert markdown_text("a\nb\\c") == "a b\\\\c"


# ----------------------------------------------------------------------------- the committed runs (smoke test)


@pytest.fixture(scope="module")
def committed():
    comparisons = read_comparisons(REFERENCE / "ranking-across-models.yaml")
    return comparisons, compare_all(comparisons, read_committed_tables(runs_of(comparisons), REFERENCE), 1234, 1000)


def test_smollm2_against_itself_across_question_modes_retentions_and_generators(committed):
    comparisons, (correlations, presses) = committed
    assert [c.name for c in comparisons] == [
        "smollm2-vs-gemma3-ruler",
        "smollm2-ruler-aware-vs-agnostic", "smollm2-ruler-50-vs-10", "smollm2-haystack-vs-ruler-niah-single-2"]
    assert [c.readme for c in comparisons] == [True, False, False, False]  # the README shows the two models alone
    assert correlations.groupby("comparison", sort=False).size().to_dict() == {
        "smollm2-vs-gemma3-ruler": 2, "smollm2-ruler-aware-vs-agnostic": 3, "smollm2-ruler-50-vs-10": 2,
        "smollm2-haystack-vs-ruler-niah-single-2": 3}
    smollm2 = correlations[correlations["comparison"] != "smollm2-vs-gemma3-ruler"]
    assert (smollm2["n_presses"] == 8).all()
    # Gemma's RULER shares four tasks and five presses with SmolLM2's, question-agnostic, at the two retentions both
    # ran (50% and 25%: Gemma's 75% and SmolLM2's 10% have no partner), each task read once
    gemma = correlations[correlations["comparison"] == "smollm2-vs-gemma3-ruler"]
    assert sorted(gemma["a_retention"]) == sorted(gemma["b_retention"]) == [0.25, 0.5]
    assert (gemma["n_presses"] == 5).all()
    assert all(cells.split(", ").count("ruler-4k/niah_multikey_1") == 1 and cells.count(", ") == 3 for cells in gemma["b_cells"])
    for column in ("spearman", "kendall"):
        low, high = correlations[f"{column}_ci_low"], correlations[f"{column}_ci_high"]
        assert ((-1 <= low) & (low <= high) & (high <= 1)).all()
    assert (correlations["undefined_resamples"] == 0).all()
    # one model's presses keep much of their order when it loses the question: every interval above 0
    aware = correlations[correlations["comparison"] == "smollm2-ruler-aware-vs-agnostic"]
    assert (aware["spearman_ci_low"] > 0).all() and aware["a_cells"].iloc[0].count("/") == 7
    # the project's haystacks hold 14 presses, NVIDIA's RULER 8: the other six are named as not ranked
    haystack = correlations[correlations["comparison"] == "smollm2-haystack-vs-ruler-niah-single-2"].iloc[0]
    assert haystack["left_out"].count("(B: not run)") == 6 and "kvzip (B: not run)" in haystack["left_out"]
    assert haystack["b_cells"] == "ruler-1k/niah_single_2, ruler-2k/niah_single_2"


def test_a_pooled_score_is_the_mean_of_the_committed_summarys_cells(committed):
    _, (_, presses) = committed
    summary = pd.concat([pd.read_csv(REFERENCE / f"h200-smollm2-ruler-at-{k}/tables/summary.csv") for k in (50, 10)])
    ruler = summary[summary["dataset"].isin(["ruler-1k", "ruler-2k"])]
    for (method, retention, mode), group in ruler[ruler["method"] != "full_cache"].groupby(
            ["method", "retention", "question_mode"]):
        expected = group.groupby("task")["score"].mean().mean()  # each task name once, lengths averaged first
        side_ = "a" if retention == 0.5 else "b"
        rows = presses[(presses["comparison"] == "smollm2-ruler-50-vs-10") & (presses["method"] == method)
                       & (presses[f"{side_}_question_mode"] == mode)]
        assert rows[f"{side_}_score"].iloc[0] == pytest.approx(expected, abs=0.01), (method, retention, mode)


def test_too_few_presses_in_two_committed_runs_is_refused_naming_them():
    # the first RULER slice ran SnapKV and Compactor alone at 25%
    made = Comparison(
        "presses-vs-at-25", "t",
        Side("A", "smollm2-135m-instruct", ("h200-smollm2-ruler-presses",), ("ruler-1k", "ruler-2k")),
        Side("B", "smollm2-135m-instruct", ("h200-smollm2-ruler-at-25",), ("ruler-1k", "ruler-2k")),
    )
    runs = ["h200-smollm2-ruler-presses", "h200-smollm2-ruler-at-25"]
    with pytest.raises(ComparisonError) as refused:
        compare(made, read_committed_tables(runs, REFERENCE), 1, 100)
    assert "2 presses with complete cells in both (snapkv, compactor)" in str(refused.value)
    assert "runs h200-smollm2-ruler-presses" in str(refused.value) and "runs h200-smollm2-ruler-at-25" in str(refused.value)


# ----------------------------------------------------------------------------- the README's block


DOCS = runpy.run_path(str(REPO / "tools/docs.py"))


def test_the_readme_has_no_block_until_a_comparison_is_marked_for_it():
    readme = (REPO / "README.md").read_text()
    block = DOCS["ranking_across_models"]()
    if block is None:  # SmolLM2 against Gemma 3 270M waits for Gemma's runs
        assert "tools/docs.py ranking-across-models" not in readme
    else:
        assert DOCS["replace_block"](readme, "ranking-across-models", block) == readme, (
            "run: python tools/docs.py ranking-across-models")


def test_the_readme_block_is_made_from_the_comparisons_marked_for_it(tmp_path, committed):
    declaration = yaml.safe_load((REFERENCE / "ranking-across-models.yaml").read_text())
    declaration["comparisons"][1]["readme"] = True  # the smoke test beside the two models' comparison
    path = tmp_path / "ranking-across-models.yaml"
    path.write_text(yaml.safe_dump(declaration))
    block = DOCS["ranking_across_models"](path)
    lines = block.splitlines()
    assert lines[2].startswith("| comparison | A | B | presses |")
    rows = [line for line in lines if line.startswith("| smollm2-ruler-aware-vs-agnostic |")]
    assert len(rows) == 3 and sum(line.startswith("| smollm2-vs-gemma3-ruler |") for line in lines) == 2
    assert "[how](docs/ranking-across-models.md)" in block
    # at config.yaml's seed and resamples, what `snakemake reference_figures` runs with
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    assert f"B = {DOCS['study_resamples']():,} resamples" in block and f"seed {config['seed']}:" in block
    assert DOCS["study_resamples"]() == 10_000
    # the points do not depend on the seed: they are the smoke test's
    _, (correlations, _) = committed
    aware = correlations[correlations["comparison"] == "smollm2-ruler-aware-vs-agnostic"]
    for row, (rho, tau) in zip(rows, zip(aware["spearman_rho"], aware["kendall_tau"])):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[3] == "8" and cells[5].startswith(f"{rho:.2f} [") and cells[6].startswith(f"{tau:.2f} [")
