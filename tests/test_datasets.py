"""Every dataset loader reads a small local fixture in the real schema (parquet written with pyarrow)."""

from pathlib import Path

import pytest

from kvcache_bench.data.longbench import DatasetUnavailableError, load_longbench_rows, load_ruler_rows, normalise_rows
from kvcache_bench.study.prompts import LONGBENCH_TASKS, RULER_TASKS, split_prompt

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("task", LONGBENCH_TASKS)
def test_every_english_longbench_task_loads_from_a_local_copy(task):
    rows = normalise_rows(load_longbench_rows(task, local_path=str(FIXTURES / "longbench")), task, None)
    assert [row["_id"] for row in rows] == [f"{task}-fixture-0", f"{task}-fixture-1"]
    assert rows[0]["answers"] == ["answer 0"]
    context_part, question_part = split_prompt(task, rows[0]["context"], rows[0]["input"])
    assert rows[0]["context"] in context_part
    assert rows[0]["input"] in question_part


def test_longbench_all_classes_survive_loading():
    rows = normalise_rows(load_longbench_rows("trec", local_path=str(FIXTURES / "longbench")), "trec", 1)
    assert rows == [rows[0]] and rows[0]["all_classes"] == ["Abbreviation", "Entity", "Location"]


@pytest.mark.parametrize("task", RULER_TASKS)
def test_every_ruler_subtask_loads_from_a_local_copy_of_the_kvpress_layout(task):
    rows = load_ruler_rows(task, local_path=str(FIXTURES / "ruler"), data_dir="8192")
    assert len(rows) == 1
    row = normalise_rows(rows, task, None)[0]
    assert row["input"] == f" What is the special magic number for {task} ?"
    assert "at 8192" in row["context"]
    assert row["answers"] == ["42"]
    assert row["answer_prefix"] == " Answer: The special magic number is"
    assert row["dataset"] == task and row["length"] == 8192


def test_ruler_through_the_hub_code_path_selects_the_context_length_folder():
    # datasets.load_dataset treats a local folder like a hub repository: same call, same data_dir.
    rows = load_longbench_rows("vt", hub_id=str(FIXTURES / "ruler"), data_dir="4096")
    assert len(rows) == 1 and "at 4096" in rows[0]["context"]


def test_ruler_without_a_context_length_on_the_hub_is_refused():
    with pytest.raises(DatasetUnavailableError, match="data_dir"):
        load_ruler_rows("vt", hub_id="simonjegou/ruler", data_dir=None)


def test_unknown_ruler_subtask_names_the_ones_present(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"context": ["c"], "question": ["q"], "answer_prefix": [""], "answer": [["a"]], "task": ["vt"], "max_new_tokens": [30]}),
        tmp_path / "only_vt.parquet",
    )
    with pytest.raises(DatasetUnavailableError, match="tasks present: \\['vt'\\]"):
        load_ruler_rows("cwe", local_path=str(tmp_path / "only_vt.parquet"))


def test_the_dataset_log_and_manifest_count_contexts_with_several_questions(tmp_path, caplog):
    """What the other_question mode can use: a context with one question cannot be in it."""
    import json
    import logging

    from kvcache_bench.data.longbench import write_dataset

    rows = normalise_rows(
        [{"input": f"q{i}", "context": context, "answers": ["a"], "_id": f"r{i}"} for i, context in enumerate(["x", "x", "y", "z", "z", "z"])],
        "qasper", None,
    )
    with caplog.at_level(logging.INFO, logger="kvcache_bench"):
        facts = write_dataset(rows, tmp_path / "rows.jsonl", {}, 0)
    assert facts["contexts"] == 3 and facts["contexts_with_several_questions"] == 2
    assert "2 of 3 contexts have two or more questions: the other_question mode can use 5 of 6 rows" in caplog.text
    manifest = json.loads((tmp_path / "rows.jsonl.manifest.json").read_text())
    assert manifest["dataset"]["contexts_with_several_questions"] == 2
