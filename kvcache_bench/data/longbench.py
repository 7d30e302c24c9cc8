"""Datasets in LongBench's schema: loaded from the hub or a local copy, validated, and written with their manifest.

LongBench rows carry: input (the question), context, answers (list), length, dataset, language,
all_classes, _id. Everything downstream reads only this schema.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from kvcache_bench.files import JsonlError, numbered_jsonl, sha256_of
from kvcache_bench.study.input_bounds import (
    MAX_ROW_BYTES,
    data_file_problem,
    oversized_jsonl_line,
    row_size_problem,
    row_text_bytes,
)
from kvcache_bench.study.prompts import ANSWERS_HIDDEN
from kvcache_bench.study.question_modes import contexts_with_several_questions, questions_by_context
from kvcache_bench.study.sources import DatasetUnavailableError, local_data_files, local_ruler_files

LONGBENCH_COLUMNS = ("input", "context", "answers", "length", "dataset", "language", "all_classes", "_id")

OFFLINE_HELP = (
    "The Hugging Face hub could not be reached or refused the request. Either\n"
    "  * download the data where there is network and point the config at it:\n"
    "      datasets: {{{dataset}: {{local_path: /path/to/{task}.parquet}}}}   (a .parquet/.jsonl file, or a\n"
    "      directory holding {task}.parquet, {task}.jsonl or {task}/*.parquet), or\n"
    "  * populate the Hugging Face cache and set HF_HUB_OFFLINE=1, or\n"
    "  * for gated data, export HF_TOKEN (it is read from the environment only, never written to outputs)."
)


# Where a row came from ("file, line 3"), carried by loaded rows so a bad row is reported where it is.
ROW_SOURCE = "_source"
MAX_REPORTED_PROBLEMS = 20

log = logging.getLogger(__name__)


class DataRowError(ValueError):
    """Rows that would be generated and scored as something other than what the data means."""


def load_longbench_rows(
    task: str,
    *,
    dataset_name: str = "longbench",
    hub_id: str | None = None,
    local_path: str | None = None,
    split: str = "test",
    data_dir: str | None = None,
    revision: str | None = None,
) -> list[dict]:
    """Rows of one task in LongBench's schema, from the hub (at ``revision`` when pinned) or a local file.

    RULER's subtasks (kvpress's parquet layout) are read by ``load_ruler_rows`` and converted.
    """
    from kvcache_bench.study.prompts import RULER_TASKS

    if task in RULER_TASKS:
        return load_ruler_rows(
            task,
            dataset_name=dataset_name,
            hub_id=hub_id,
            local_path=local_path,
            split=split,
            data_dir=data_dir,
            revision=revision,
        )
    import datasets

    if local_path:
        builder, files = local_data_files(local_path, task)
        if builder == "json":
            rows = [row for file in files for row in read_local_jsonl_rows(file)]
        else:
            rows = []
            for file in files:
                refuse_oversized_file(file)
                loaded = datasets.load_dataset(builder, data_files={split: [file]}, split=split)
                rows += [{**row, ROW_SOURCE: f"{file}, row {index}"} for index, row in enumerate(loaded, start=1)]
        if not rows:
            raise DataRowError(f"{', '.join(files)}: empty, no rows of task {task!r}")
    else:
        loaded = _load_from_hub(hub_id, dict(name=task), split, dataset_name, task, revision)
        rows = [
            {**row, ROW_SOURCE: f"{hub_id} ({task}, split {split}), row {index}"}
            for index, row in enumerate(loaded, start=1)
        ]
        if not rows:
            raise DataRowError(f"{hub_id} ({task}, split {split}) is empty")
    return rows


def refuse_oversized_file(path: str | Path) -> None:
    """A local data file past its bound (``study.input_bounds``) is refused by its size, before it is read."""
    if problem := data_file_problem(path):
        raise DataRowError(problem)


def read_local_jsonl_rows(path: str | Path) -> list[dict]:
    """A local JSONL file's rows, each carrying its file and 1-based line; a broken line names both.

    The file's size and each line's length are measured first, without holding a line: a row past its bound
    (``study.input_bounds``) is refused by its file and line before anything of it is parsed."""
    refuse_oversized_file(path)
    if oversized := oversized_jsonl_line(path):
        number, size = oversized
        raise DataRowError(f"{path}, line {number}: " + row_size_problem(size, "the row (its JSONL line)"))
    rows = []
    try:
        for number, row in numbered_jsonl(path):
            if not isinstance(row, dict):
                raise DataRowError(f"{path}, line {number}: a row must be a JSON object, got {type(row).__name__}")
            rows.append({**row, ROW_SOURCE: f"{path}, line {number}"})
    except JsonlError as error:
        raise DataRowError(str(error)) from None
    return rows


def _load_from_hub(
    hub_id: str | None, selector: dict, split: str, dataset_name: str, task: str, revision: str | None = None
):
    import datasets

    if not hub_id:
        raise DatasetUnavailableError(f"dataset {dataset_name!r} has neither hub_id nor local_path")
    try:
        pinned = {"revision": revision} if revision else {}
        return datasets.load_dataset(hub_id, split=split, token=os.environ.get("HF_TOKEN"), **selector, **pinned)
    except Exception as error:  # the hub's errors are many; all of them mean "not from here"
        raise DatasetUnavailableError(
            f"could not load {hub_id!r} {selector} split {split!r}: {type(error).__name__}: {error}\n"
            + OFFLINE_HELP.format(dataset=dataset_name, task=task)
        ) from error


RULER_COLUMNS = ("context", "question", "answer_prefix", "answer", "task", "max_new_tokens")


def load_ruler_rows(
    task: str,
    *,
    dataset_name: str = "ruler",
    hub_id: str | None = "simonjegou/ruler",
    local_path: str | None = None,
    split: str = "test",
    data_dir: str | None = "4096",
    revision: str | None = None,
) -> list[dict]:
    """One RULER subtask in LongBench's schema, from kvpress's parquet layout (``simonjegou/ruler``).

    That layout has one folder per context length (``data_dir``: 4096, 8192, 16384, 32768) of parquet
    files with columns context, question, answer_prefix, answer (list), task, max_new_tokens; all
    subtasks share the files and the ``task`` column tells them apart. ``local_path`` is a copy of
    the dataset repository (the folder holding ``<data_dir>/``), a folder of parquet files, or a file.
    """
    import datasets

    if local_path:
        files = local_ruler_files(local_path, data_dir)
        for file in files:
            refuse_oversized_file(file)
        loaded = datasets.load_dataset("parquet", data_files={split: files}, split=split)
    elif not data_dir:
        raise DatasetUnavailableError(
            f"dataset {dataset_name!r}: RULER on the hub needs data_dir, the context length (4096, 8192, 16384, 32768)"
        )
    else:
        loaded = _load_from_hub(hub_id, dict(data_dir=data_dir), split, dataset_name, task, revision)
    missing = [c for c in RULER_COLUMNS if c not in loaded.column_names]
    if missing:
        raise DatasetUnavailableError(f"RULER data lacks columns {missing} (has {loaded.column_names})")
    rows = []
    for index, row in enumerate(loaded):
        if row["task"] != task:
            continue
        answers = row["answer"]
        rows.append(
            {
                "input": row["question"],
                "context": row["context"],
                "answers": [answers] if isinstance(answers, str) else list(answers),
                "answer_prefix": row["answer_prefix"] or "",
                "length": int(data_dir) if data_dir and str(data_dir).isdigit() else len(row["context"].split()),
                "dataset": task,
                "language": "en",
                "all_classes": None,
                "_id": f"ruler-{data_dir or 'local'}-{task}-{index}",
                ROW_SOURCE: f"{local_path or hub_id} (data_dir {data_dir}), row {index + 1}",
            }
        )
    if not rows:
        tasks = sorted(set(loaded["task"]))
        raise DatasetUnavailableError(f"no rows of RULER task {task!r} (data_dir {data_dir!r}); tasks present: {tasks}")
    return rows


def _is_text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def row_problems(row: dict, task: str) -> list[str]:
    """What is wrong with one row for ``task``: each problem names the field."""
    from kvcache_bench.study.prompts import PROMPTS

    problems = []
    # a parquet or hub row (a JSONL line past the bound was refused as it was read): its text, as the prompt takes it
    if (size := row_text_bytes({k: v for k, v in row.items() if k != ROW_SOURCE})) > MAX_ROW_BYTES:
        problems.append(row_size_problem(size, "the row's text"))
    asks_question = "{input}" in PROMPTS[task]
    if asks_question and not _is_text(row.get("input")):
        state = "missing" if "input" not in row else f"empty or not text ({row['input']!r})"
        problems.append(f"field 'input' (the question) is {state}; task {task!r} asks it in every prompt")
    elif not asks_question and row.get("input") is not None and not isinstance(row["input"], str):
        problems.append(f"field 'input' must be text, got {type(row['input']).__name__}")
    if not _is_text(row.get("context")):
        state = "missing" if "context" not in row else "empty or not text"
        problems.append(f"field 'context' is {state}")
    answers = row.get("answers")
    if "answers" not in row:
        problems.append("field 'answers' (the references the prediction is scored against) is missing")
    elif task in ANSWERS_HIDDEN and answers == []:
        pass  # ZeroSCROLLS: the benchmark withholds its answers; the cell writes predictions and no score
    elif not (
        _is_text(answers)
        or (isinstance(answers, list) and all(isinstance(a, str) for a in answers) and any(map(_is_text, answers)))
    ):
        problems.append(f"field 'answers' must be a non-empty reference text or list of texts, got {answers!r:.80}")
    length = row.get("length")
    if length is not None and (
        isinstance(length, bool) or not (isinstance(length, int) or (isinstance(length, float) and length.is_integer()))
    ):
        problems.append(f"field 'length' must be an integer, got {length!r:.40}")
    classes = row.get("all_classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        problems.append(f"field 'all_classes' must be a list of texts or null, got {classes!r:.80}")
    if row.get("_id") is not None and not isinstance(row["_id"], (str, int)):
        problems.append(f"field '_id' must be text, got {type(row['_id']).__name__}")
    if row.get("answer_prefix") is not None and not isinstance(row["answer_prefix"], str):
        problems.append(f"field 'answer_prefix' must be text, got {type(row['answer_prefix']).__name__}")
    return problems


def validate_rows(rows: list[dict], task: str) -> None:
    """Refuse, naming each row's file and line and the field, any row that would be measured wrongly."""
    problems, first_seen = [], {}
    for index, row in enumerate(rows, start=1):
        where = row.get(ROW_SOURCE) or f"row {index}"
        problems += [f"{where}: {problem}" for problem in row_problems(row, task)]
        if row.get("_id") is not None:
            key = str(row["_id"])
            if key in first_seen:
                problems.append(f"{where}: field '_id' {key!r} repeats {first_seen[key]}; ids must be unique")
            first_seen.setdefault(key, where)
    if problems:
        shown = problems[:MAX_REPORTED_PROBLEMS]
        more = f"\n  ... and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise DataRowError(
            f"{len(problems)} problem(s) in the rows of task {task!r}; nothing was written:\n"
            + "\n".join(f"  - {p}" for p in shown)
            + more
        )


def normalise_rows(rows: list[dict], task: str, num_examples: int | None) -> list[dict]:
    """Keep the first ``num_examples`` rows in file order, checked, each with every LongBench column present.

    RULER rows also keep ``answer_prefix`` (the start of the answer the prompt ends with).
    """
    if not rows:
        raise DataRowError(f"task {task!r}: the data is empty, no rows")
    selected = rows if not num_examples else rows[:num_examples]
    if num_examples and len(selected) < num_examples:
        log.warning(
            "num_examples is %d but task %r has only %d rows: its cells will be flagged incomplete",
            num_examples,
            task,
            len(selected),
        )
    validate_rows(selected, task)
    normalised = []
    for index, row in enumerate(selected):
        answers = row.get("answers")
        if isinstance(answers, str):
            answers = [answers]
        out = {
            "input": row.get("input") or "",
            "context": row["context"],
            "answers": list(answers or []),
            "length": int(row.get("length") or len(row["context"].split())),
            "dataset": row.get("dataset") or task,
            "language": row.get("language") or "en",
            "all_classes": row.get("all_classes"),
            "_id": str(row["_id"])
            if row.get("_id") is not None
            else hashlib.sha1(f"{task}:{index}:{row['context'][:200]}".encode()).hexdigest(),
        }
        if row.get("answer_prefix"):
            out["answer_prefix"] = row["answer_prefix"]
        normalised.append(out)
    return normalised


def write_dataset(
    rows: list[dict], out_path: str | Path, params: dict, seed: int | None, extra: dict | None = None
) -> dict:
    """Write rows as JSONL (atomically) and the manifest with row count and sha256 (and ``extra``) beside it."""
    from kvcache_bench.files import write_jsonl_atomic
    from kvcache_bench.manifest import write_manifest

    count = write_jsonl_atomic(out_path, rows)
    several, contexts = contexts_with_several_questions(rows)
    usable = sum(len(group) for group in questions_by_context(rows) if len(group) >= 2)
    log.info(
        "%d of %d contexts have two or more questions: the other_question mode can use %d of %d rows",
        several,
        contexts,
        usable,
        count,
    )
    facts = {
        "rows": count,
        "sha256": sha256_of(out_path),
        "columns": list(LONGBENCH_COLUMNS),
        "contexts": contexts,
        "contexts_with_several_questions": several,
    }
    write_manifest(out_path, params, seed, extra={"dataset": facts, **(extra or {})})
    return facts
