"""kvpress's other datasets: read offline from small files in kvpress's column layout, scored as kvpress scores them.

The expected scores below follow kvpress's evaluation/benchmarks/*/calculate_metrics.py case by case, quirks
included (each case says which).
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from kvcache_bench.analysis.metrics import length_bucket_means, metric_for, score_example
from kvcache_bench.data.kvpress_datasets import BENCHMARKS, load_kvpress_rows
from kvcache_bench.data.longbench import DataRowError, normalise_rows
from kvcache_bench.study.prompt_tokens import build_prompt_tokens
from kvcache_bench.study.prompts import MAX_NEW_TOKENS


def _write(folder, task, rows, fmt="parquet"):
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pd.DataFrame(rows).to_parquet(folder / f"{task}.parquet")
    else:
        (folder / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_longbench_e_rows_keep_kvpress_prompt_parts_and_their_length(tmp_path):
    rows = [
        {"context": f"Article: text {i}\n\n", "question": f"Question: q{i}?\n\n", "answer_prefix": "Answer:", "answers": [f"a{i}"],
         "all_classes": None, "length": 1000 * (3 * i + 1), "_id": f"id{i}", "task": "qasper", "max_new_tokens": 148}
        for i in range(3)
    ]
    _write(tmp_path / "copy", "qasper_e", rows)
    loaded = normalise_rows(load_kvpress_rows("longbench_e", "qasper_e", dataset_name="lbe", local_path=str(tmp_path / "copy")), "qasper_e", None)
    assert [r["length"] for r in loaded] == [1000, 4000, 7000] and [r["_id"] for r in loaded] == ["id0", "id1", "id2"]
    assert loaded[0]["answer_prefix"] == "Answer:" and loaded[0]["input"] == "Question: q0?\n\n" and loaded[0]["answers"] == ["a0"]
    assert MAX_NEW_TOKENS["qasper_e"] == 148  # LongBench's 128 + kvpress's 20


def test_prompt_is_context_then_question_then_the_answer_prefix_as_kvpress_joins_them(smollm2_tokenizer):
    prompt = build_prompt_tokens(smollm2_tokenizer, "longbench_v2", "Please read <text>DOC</text>\n\n", "What is it?", 10_000, answer_prefix="So")
    text = smollm2_tokenizer.decode(prompt.context_ids + prompt.question_ids)
    assert "Please read <text>DOC</text>\n\nWhat is it?" in text and text.endswith("So")
    assert "What is it?" in smollm2_tokenizer.decode(prompt.question_ids) and "What" not in smollm2_tokenizer.decode(prompt.context_ids)


def test_a_file_without_kvpress_columns_names_what_it_lacks(tmp_path):
    _write(tmp_path, "math500", [{"problem": "1+1", "answer": "2"}], fmt="jsonl")
    with pytest.raises(DataRowError, match=r"math500\.jsonl, line 1: lacks kvpress's columns \['context', 'question', 'answer_prefix'\]"):
        load_kvpress_rows("math500", "math500", dataset_name="m", local_path=str(tmp_path))


def test_infinitebench_reads_each_task_and_keeps_every_reference(tmp_path):
    _write(tmp_path, "longdialogue_qa_eng", [
        {"id": 7, "context": "Script ...", "question": "Which character is $$MASK$$ ?", "answer_prefix": "The name is", "answer": ["JOHN", "Johnny"]},
    ])
    (row,) = load_kvpress_rows("infinitebench", "longdialogue_qa_eng", dataset_name="ib", local_path=str(tmp_path))
    assert row["answers"] == ["JOHN", "Johnny"] and row["_id"] == "7"
    assert set(BENCHMARKS["infinitebench"].data_dirs) == {
        "passkey", "kv_retrieval", "number_string", "longbook_qa_eng", "longbook_choice_eng", "longdialogue_qa_eng",
        "code_run", "code_debug", "math_find", "math_calc"}


@pytest.mark.parametrize(("task", "prediction", "references", "expected"), [
    # LongBench-v2: the letter in LongBench's sentence, stars dropped, with or without brackets
    ("longbench_v2", "**The correct answer is (B).**", ["B"], 1.0),
    ("longbench_v2", "The correct answer is B", ["B"], 1.0),
    ("longbench_v2", "The answer is (B)", ["B"], 0.0),
    # AIME25: the last box; quirk: nothing boxed compares the text up to the first "}"
    ("aime25", "first \\boxed{12} then \\boxed{70}", ["70"], 1.0),
    ("aime25", "70", ["70"], 1.0),
    ("aime25", "the answer is 70", ["70"], 0.0),
    # MATH500: the first box; a nested brace cuts the answer
    ("math500", "\\boxed{5} or \\boxed{6}", ["5"], 1.0),
    ("math500", "5", ["5"], 0.0),
    ("math500", "\\boxed{\\frac{1}{2}}", ["\\frac{1}{2}"], 0.0),
    # InfiniteBench
    ("passkey", "The pass key is 71432. Done", ["71432"], 1.0),
    ("passkey", "It is 7143 2", ["71432"], 0.0),
    ("number_string", "2200012222", ["2200012222"], 1.0),
    ("kv_retrieval", 'value: "abc-1".', ["abc-1"], 1.0),
    ("kv_retrieval", "abc-12", ["abc-1"], 0.0),
    ("longdialogue_qa_eng", "probably johnny", ["JOHN", "Johnny"], 1.0),
    ("longdialogue_qa_eng", "MARY", ["JOHN"], 0.0),
    ("longbook_choice_eng", "I would say B, not A... actually C", ["C"], 1.0),
    ("longbook_choice_eng", "B is right", ["B"], 1.0),
    ("longbook_choice_eng", "the answer is: D", ["D"], 1.0),
    ("longbook_choice_eng", "none of them", ["A"], 0.0),
    ("longbook_qa_eng", "the red house", ["A red house", "barn"], 1.0),
    # LongBench-e: LongBench's metric of the base task, first line for the few-shot tasks
    ("triviaqa_e", "\nParis\nQuestion: next?", ["Paris"], 1.0),
    ("passage_retrieval_en_e", "Paragraph 3", ["Paragraph 3"], 1.0),
])
def test_scores_follow_kvpress_calculate_metrics(task, prediction, references, expected):
    assert score_example(task, prediction, references) == pytest.approx(expected)


def test_longbench_e_metric_is_the_base_tasks():
    assert metric_for("qasper_e").name == metric_for("qasper").name == "qa_f1"
    assert metric_for("lcc_e").name == "code_sim" and metric_for("gov_report_e").name == "rouge_l"


def test_longbench_e_length_buckets_cut_where_kvpress_cuts():
    means = length_bucket_means([1.0, 0.0, 0.5, 1.0, 0.25], [100, 3999, 4000, 7999, 8000])
    assert means == {"0-4k": 50.0, "4-8k": 75.0, "8k+": 25.0}
    assert math.isnan(length_bucket_means([1.0], [10])["8k+"])


def test_loogle_reads_each_task_in_kvpress_layout_with_its_generation_length(tmp_path):
    _write(tmp_path, "shortdep_cloze", [{
        "context": "Please fill in the clozes based on the given long texts below. ... DOC", "question": "\n Question: <mask-0> met "
        "<mask-1>. What are the masked entities?\n", "answer_prefix": "Answer:",
        "answer": '{"<mask-0>": "Bob", "<mask-1>": "Alice"}', "task": "shortdep_cloze", "max_new_tokens": 50,
    }])
    (row,) = load_kvpress_rows("loogle", "shortdep_cloze", dataset_name="lg", local_path=str(tmp_path))
    assert row["answers"] == ['{"<mask-0>": "Bob", "<mask-1>": "Alice"}'] and row["answer_prefix"] == "Answer:"
    assert (MAX_NEW_TOKENS["shortdep_qa"], MAX_NEW_TOKENS["longdep_qa"], MAX_NEW_TOKENS["shortdep_cloze"]) == (300, 500, 50)
    assert set(BENCHMARKS["loogle"].data_dirs) == {"shortdep_qa", "longdep_qa", "shortdep_cloze", "longdep_summarization"}


def test_zero_scrolls_reads_one_task_from_the_shared_file_and_keeps_no_answer(tmp_path):
    """kvpress's hub copy holds all ten tasks in one split, told apart by the task column, with answer ''."""
    rows = [
        {"context": f"Doc {task}", "question": f"Q {task}", "answer_prefix": "Answer:", "answer": "", "task": task,
         "max_new_tokens": tokens, "id": f"{task}-1"}
        for task, tokens in (("qasper", 128), ("quality", 10), ("qasper", 128))
    ]
    (tmp_path / "zero_scrolls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_kvpress_rows("zero_scrolls", "qasper_zs", dataset_name="zs", local_path=str(tmp_path / "zero_scrolls.jsonl"))
    assert [r["context"] for r in loaded] == ["Doc qasper", "Doc qasper"] and all(r["answers"] == [] for r in loaded)
    assert MAX_NEW_TOKENS["qasper_zs"] == 128 and MAX_NEW_TOKENS["qasper"] == 128 and MAX_NEW_TOKENS["gov_report_zs"] == 1024


def test_zero_scrolls_has_no_metric_and_says_why():
    from kvcache_bench.analysis.metrics import ANSWERS_HIDDEN

    assert ANSWERS_HIDDEN == set(BENCHMARKS["zero_scrolls"].data_dirs)
    with pytest.raises(ValueError, match="ZeroSCROLLS hides its answers"):
        metric_for("qasper_zs")
    assert metric_for("qasper").name == "qa_f1"  # LongBench's qasper keeps its own metric


@pytest.mark.parametrize(("task", "prediction", "references", "expected"), [
    # LooGLE QA and summaries: ROUGE-L recall of the answer (the rouge package, as kvpress calls it)
    ("shortdep_qa", "the cat sat", ["the cat sat on the mat"], 0.6),  # the package counts the reference's 5 distinct words
    ("longdep_qa", "the cat sat on the mat today", ["the cat sat on the mat"], 1.0),
    ("longdep_summarization", "", ["a summary"], 0.0),  # the package refuses an empty hypothesis: 0, as kvpress
    # LooGLE cloze: the share of masks given exactly; no literal dict scores 0 (kvpress: eval fails -> 0)
    ("shortdep_cloze", " {'<mask-0>': 'Bob', '<mask-1>': 'Eve'}", ['{"<mask-0>": "Bob", "<mask-1>": "Alice"}'], 0.5),
    ("shortdep_cloze", "Bob and Alice", ['{"<mask-0>": "Bob", "<mask-1>": "Alice"}'], 0.0),
    ("shortdep_cloze", "__import__('os').getcwd()", ['{"<mask-0>": "Bob"}'], 0.0),  # never executed
    # InfiniteBench code and math, labels as kvpress's hub stores them (strings)
    ("code_run", "The return value is: -12.", ["-12"], 1.0),
    ("code_run", "-12 is returned", ["-12"], 0.0),  # the last word must be the int
    ("code_run", "the value is 42", ["42"], 1.0),
    ("code_debug", "The correct option is: C", ["C"], 1.0),
    ("code_debug", "B. func_x", ["func_x", "B"], 1.0),
    ("code_debug", "maybe A", ["C"], 0.0),
    ("math_find", "The largest is 97, then 12", ["97"], 1.0),
    ("math_find", "3.5", ["3.5"], 1.0),
    ("math_calc", "Values: [1, 4, 8, 3]", ["1", "4", "9", "3"], 0.5),
])
def test_loogle_and_infinitebench_code_math_scores(task, prediction, references, expected):
    assert score_example(task, prediction, references) == pytest.approx(expected)


def test_a_zero_scrolls_dataset_plans_predictions_and_no_score(workflow_copy):
    """Beside a scored LooGLE task, a ZeroSCROLLS task's cells are generated but never scored or tabulated."""
    from conftest import planned_jobs, run_snakemake

    fixtures = workflow_copy / "fixtures"
    _write(fixtures / "loogle", "shortdep_qa", [
        {"context": "Please answer ... Alice lives in Paris.", "question": "\nQuestion: Where?\n", "answer_prefix": "Answer: ",
         "answer": "Paris", "task": "shortdep_qa", "max_new_tokens": 300}])
    (fixtures / "zero_scrolls.jsonl").write_text(json.dumps(
        {"context": "Story: Bob works at Acme.", "question": "Question: Who?", "answer_prefix": "Answer:", "answer": "",
         "task": "narrative_qa", "max_new_tokens": 64}) + "\n")
    config = {
        "seed": 1, "models": {"canary": {"path": "resources/canary", "dtype": "float32", "attn_implementation": "sdpa",
                                         "trust_remote_code": False, "max_context_tokens": 4096}},
        "datasets": {"loogle": {"source": "loogle", "local_path": "fixtures/loogle", "tasks": ["shortdep_qa"]},
                     "zs": {"source": "zero_scrolls", "local_path": "fixtures/zero_scrolls.jsonl", "tasks": ["narrative_qa_zs"]}},
        "methods": ["full_cache", "snapkv"], "retentions": [0.5], "batch_sizes": [1], "decode_batch_sizes": [1],
        "question_modes": ["question_aware"], "generation": {"device": "cpu", "threads": 1},
    }
    (workflow_copy / "config" / "zs.yaml").write_text(json.dumps(config))
    result = run_snakemake(workflow_copy, "-n", "--configfile", "config/zs.yaml", check=True)
    jobs = planned_jobs(result.stdout)
    assert (jobs["generate"], jobs["score"], jobs["aggregate"]) == (4, 2, 1)
    assert "results/scores/zs/" not in result.stdout and "results/predictions/zs/narrative_qa_zs/" in result.stdout
