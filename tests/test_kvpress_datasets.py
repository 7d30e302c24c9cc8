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
from kvcache_bench.study.prompts import MAX_NEW_TOKENS, build_prompt_tokens


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
        "passkey", "kv_retrieval", "number_string", "longbook_qa_eng", "longbook_choice_eng", "longdialogue_qa_eng"}


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
