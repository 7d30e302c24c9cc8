"""The scores must equal what LongBench's / RULER's own evaluators give, on hand-computed cases."""

import pytest

from kvcache_bench.analysis.metrics import (
    LONGBENCH_TASK_METRICS,
    RULER_TASK_METRICS,
    metric_for,
    score_example,
    score_records,
    task_score,
)
from kvcache_bench.analysis.scorers.longbench import (
    classification_score,
    code_sim_score,
    count_score,
    normalize_answer,
    qa_f1_score,
    retrieval_score,
    rouge_l_score,
)

TREC_CLASSES = ["Abbreviation", "Entity", "Description", "Human being", "Location", "Numeric value"]


def test_normalisation_lowercases_strips_ascii_punctuation_then_articles_and_folds_space():
    assert normalize_answer("  An apple,  and THE pear. ") == "apple and pear"
    # punctuation goes first, so an article glued inside a hyphenated word is not a word of its own
    assert normalize_answer("State-of-the-art, the model.") == "stateoftheart model"
    # only ASCII punctuation is stripped (LongBench's string.punctuation): curly quotes stay
    assert normalize_answer("\u201cyes\u201d") == "\u201cyes\u201d"


def test_qa_f1_is_token_f1_after_normalisation():
    assert qa_f1_score("The Cat sat.", "a cat sat!") == 1.0
    # 2 common tokens, precision 2/4, recall 2/2 -> F1 = 2/3
    assert qa_f1_score("cat sat on mat", "cat mat") == pytest.approx(2 / 3)
    assert qa_f1_score("dog", "cat") == 0.0
    assert qa_f1_score("", "cat") == 0.0
    # repeated tokens count as a multiset: "cat cat" vs "cat" -> P 1/2, R 1 -> 2/3
    assert qa_f1_score("cat cat", "cat") == pytest.approx(2 / 3)
    assert qa_f1_score("\u201cyes\u201d", "yes") == 0.0


def test_an_example_scores_its_best_reference():
    # "cat sat on": 3 common tokens, P 3/4, R 1 -> 6/7 beats "cat mat" (2/3) and "dog" (0)
    assert score_example("qasper", "cat sat on mat", ["dog", "cat mat", "cat sat on"]) == pytest.approx(6 / 7)


def test_rouge_l_is_longbenchs_case_sensitive_union_lcs():
    # LongBench's rouge package: union LCS "the cat on mat" = 4 over the prediction's 5 distinct words and the
    # reference's 4: P 4/5, R 1 -> F 8/9 (rouge-score would say 0.8)
    assert rouge_l_score("the cat sat on the mat", "the cat on mat") == pytest.approx(8 / 9)
    # case and punctuation count: only "sat" matches ("The" != "the", "CAT," != "cat"): P = R = 1/3
    assert rouge_l_score("The CAT, sat.", "the cat sat") == pytest.approx(1 / 3)
    assert rouge_l_score("", "the cat sat") == 0.0  # LongBench returns 0 when rouge raises on empty input
    assert score_example("gov_report", "a b c d", ["a x c y"]) == pytest.approx(0.5)


def test_classification_scores_one_over_the_number_of_classes_named():
    assert classification_score("Location", "Location", all_classes=TREC_CLASSES) == 1.0
    assert classification_score("Location or Human being", "Location", all_classes=TREC_CLASSES) == 0.5
    assert classification_score("Human being", "Location", all_classes=TREC_CLASSES) == 0.0


def test_classification_keeps_longbench_quirks():
    # "Num" is dropped (contained in the reference); the list shifts and "Numeric" escapes the check,
    # so two matches remain: 1/2, where a careful implementation would give 1.
    classes = ["Num", "Numeric", "Numeric value"]
    assert classification_score("Numeric value", "Numeric value", all_classes=classes) == 0.5
    # a misspelt class is NOT rescued by the closest-match fallback (unreachable in LongBench)
    assert classification_score("Locatoin", "Location", all_classes=TREC_CLASSES) == 0.0


def test_classification_without_label_set_is_an_error():
    with pytest.raises(ValueError, match="all_classes"):
        score_example("trec", "Location", ["Location"], all_classes=None)


def test_retrieval_and_count_score_the_share_of_numbers_that_are_right():
    assert retrieval_score("Paragraph 12", "Paragraph 12") == 1.0
    assert retrieval_score("Paragraph 3 or Paragraph 12", "Paragraph 12") == 0.5
    assert retrieval_score("Paragraph 120", "Paragraph 12") == 0.0
    assert retrieval_score("I cannot tell", "Paragraph 12") == 0.0
    assert count_score("There are 7 unique paragraphs out of 30", "7") == 0.5
    assert count_score("seven", "7") == 0.0


def test_code_similarity_uses_the_first_line_that_is_code():
    prediction = "```python\n# the next line\nx = foo(1)\n```"
    assert code_sim_score(prediction, "x = foo(1)") == 1.0
    # difflib: 10 matching chars of 10 + 12 -> ratio 20/22 = 0.909 -> fuzz.ratio rounds to 91
    assert code_sim_score("\n\nreturn a+b", "return a + b") == 0.91
    assert code_sim_score("// only a comment", "x = 1") == 0.0


def test_first_line_only_for_the_few_shot_tasks():
    continued = "Location\nQuestion: Who wrote Hamlet?\nType: Human being"
    assert score_example("trec", continued, ["Location"], all_classes=TREC_CLASSES) == 1.0
    assert score_example("triviaqa", "\n\nParis\nParis is the capital of France", ["Paris"]) == 1.0
    # other tasks see the whole prediction
    assert score_example("qasper", "Paris\nParis is the capital", ["Paris"]) < 1.0


def test_ruler_string_match_all_averages_and_part_takes_the_best_reference():
    assert score_example("niah_multivalue", "The values are 1234 and 9999.", ["1234", "5678"]) == 0.5
    assert score_example("niah_single_1", "the number is 77\x00", ["77"]) == 1.0
    assert score_example("qa_1", "PARIS", ["Paris", "Lyon"]) == 1.0
    assert score_example("qa_2", "Berlin", ["Paris", "Lyon"]) == 0.0
    assert score_example("vt", "X1 X2", ["x1", "x2", "x3"]) == pytest.approx(2 / 3)


def test_every_task_has_the_published_metric():
    expected = {
        "qa_f1": {"narrativeqa", "qasper", "multifieldqa_en", "hotpotqa", "2wikimqa", "musique", "triviaqa"},
        "rouge_l": {"gov_report", "qmsum", "multi_news", "samsum"},
        "classification": {"trec"},
        "retrieval": {"passage_retrieval_en"},
        "count": {"passage_count"},
        "code_sim": {"lcc", "repobench-p"},
    }
    assert {task: metric_for(task).name for task in LONGBENCH_TASK_METRICS} == {
        task: name for name, tasks in expected.items() for task in tasks
    }
    assert {metric_for(t).name for t in RULER_TASK_METRICS if t.startswith("qa_")} == {"string_match_part"}
    assert {metric_for(t).name for t in RULER_TASK_METRICS if not t.startswith("qa_")} == {"string_match_all"}
    assert len(RULER_TASK_METRICS) == 13
    assert metric_for("synthetic_qa").name == "qa_f1"
    with pytest.raises(ValueError, match="no metric"):
        metric_for("not_a_task")


def test_task_score_is_mean_times_100_rounded_to_two_places():
    assert task_score([1.0, 0.5, 1 / 3]) == 61.11
    assert task_score([0.0]) == 0.0


def test_example_without_references_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="no reference"):
        score_example("qasper", "anything", [])


def test_score_records_keep_each_example_for_inspection():
    records = [
        {"id": "a", "prediction": "cat", "references": ["cat"]},
        {"id": "b", "prediction": "dog", "references": ["cat"]},
    ]
    scored = score_records("qasper", records)
    assert [(r["id"], r["metric"], r["score"], r["prediction"]) for r in scored] == [
        ("a", "qa_f1", 1.0, "cat"),
        ("b", "qa_f1", 0.0, "dog"),
    ]
