"""kvpress's other evaluation datasets, read in kvpress's column layout from its hub ids or a local copy.

kvpress's evaluation (``evaluation/evaluate_registry.py``'s DATASET_REGISTRY) reads each benchmark from a hub
dataset it made with ``evaluation/benchmarks/<name>/create_huggingface_dataset.py``: rows with ``context``
(the benchmark's instruction and document), ``question``, ``answer_prefix`` (opens the answer), the
references (``answers`` for LongBench-e, ``answer`` elsewhere), ``task`` and ``max_new_tokens``; one
``data_dir`` per task. kvpress's pipeline prompts context + question, then the answer prefix, so each task's
prompt here is ``{context}{input}`` with the row's answer_prefix (study/prompts.py).

Sources (one per benchmark, all read here: they share kvpress's layout):

* ``longbench_e``: LongBench-e (``Xnhyacinth/LongBench``, data_dir ``<task>_e``), 13 tasks; the rows'
  ``length`` (LongBench's word count) puts each example in kvpress's buckets 0-4k, 4-8k, 8k+.
* ``longbench_v2``: LongBench-v2 (``simonjegou/LongBench-v2``, data_dir ``0shot``), multiple choice.
* ``infinitebench``: InfiniteBench (``MaxJeblick/InfiniteBench``, data_dir the task), its ten English tasks
  (passkey, kv_retrieval, number_string, longbook_qa_eng, longbook_choice_eng, longdialogue_qa_eng, code_run,
  code_debug, math_find, math_calc; not longbook_sum_eng, which kvpress's scorer refuses).
* ``loogle``: LooGLE (``simonjegou/loogle``, data_dir the task): shortdep_qa, longdep_qa, shortdep_cloze,
  longdep_summarization.
* ``zero_scrolls``: ZeroSCROLLS (``simonjegou/zero_scrolls``, one split, the rows' ``task`` column): its ten
  tasks, named ``<task>_zs`` here (gov_report, qasper, qmsum and musique are LongBench's names too). Its answers
  are hidden (the references are empty): the study writes predictions, and no score.
* ``aime25``, ``math500``: ``alessiodevoto/aime25`` and ``alessiodevoto/math500``, answers in ``\\boxed{}``.

``local_path`` is a copy: a .parquet/.jsonl file, or a folder with ``<task>.parquet``, ``<task>.jsonl`` or
``<task>/*.parquet`` (as for every local dataset; a hub snapshot of LongBench-e or InfiniteBench is such a folder).
A row's own ``max_new_tokens`` is kvpress's; the study's is per task (study/prompts.py holds kvpress's values where
its scripts state them, ``generation.max_new_tokens`` overrides): a row asking for another length is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kvcache_bench.study.prompts import LONGBENCH_E_TASKS  # one list for the lengths, these data_dirs and the metrics

log = logging.getLogger(__name__)

INFINITEBENCH_TASKS = (
    "passkey",
    "kv_retrieval",
    "number_string",
    "longbook_qa_eng",
    "longbook_choice_eng",
    "longdialogue_qa_eng",
    "code_run",
    "code_debug",
    "math_find",
    "math_calc",
)
LOOGLE_TASKS = ("shortdep_qa", "longdep_qa", "shortdep_cloze", "longdep_summarization")
ZERO_SCROLLS_TASKS = (
    "gov_report",
    "summ_screen_fd",
    "qmsum",
    "qasper",
    "narrative_qa",
    "quality",
    "musique",
    "squality",
    "space_digest",
    "book_sum_sort",
)


@dataclass(frozen=True)
class Benchmark:
    hub_id: str
    data_dirs: dict  # task -> the hub dataset's data_dir holding it (None: the whole dataset)
    references: str = "answer"
    # rows of several tasks share the files and the rows' task column tells them apart: task -> its value there
    row_tasks: dict | None = None
    answers_hidden: bool = False  # the references are withheld (a leaderboard scores them): predictions only


BENCHMARKS = {
    "longbench_e": Benchmark(
        "Xnhyacinth/LongBench", {f"{t}_e": f"{t}_e" for t in LONGBENCH_E_TASKS}, references="answers"
    ),
    "longbench_v2": Benchmark("simonjegou/LongBench-v2", {"longbench_v2": "0shot"}),
    "infinitebench": Benchmark("MaxJeblick/InfiniteBench", {t: t for t in INFINITEBENCH_TASKS}),
    "loogle": Benchmark("simonjegou/loogle", {t: t for t in LOOGLE_TASKS}),
    "zero_scrolls": Benchmark(
        "simonjegou/zero_scrolls",
        {f"{t}_zs": None for t in ZERO_SCROLLS_TASKS},
        row_tasks={f"{t}_zs": t for t in ZERO_SCROLLS_TASKS},
        answers_hidden=True,
    ),
    "aime25": Benchmark("alessiodevoto/aime25", {"aime25": None}),
    "math500": Benchmark("alessiodevoto/math500", {"math500": None}),
}
LAYOUT_COLUMNS = ("context", "question", "answer_prefix")


def tasks_of(source: str) -> list[str]:
    return list(BENCHMARKS[source].data_dirs)


def local_files(task: str, local_path: str) -> list[str]:
    """The files of a local copy holding ``task``, found as every local dataset's are (a hub snapshot of
    LongBench-e or InfiniteBench has them as ``<task>/*.parquet`` already)."""
    from kvcache_bench.study.sources import local_data_files

    return local_data_files(local_path, task)[1]


def load_kvpress_rows(
    source: str,
    task: str,
    *,
    dataset_name: str,
    hub_id: str | None = None,
    local_path: str | None = None,
    split: str = "test",
    revision: str | None = None,
) -> list[dict]:
    """``task``'s rows of benchmark ``source`` in LongBench's schema (with kvpress's answer_prefix kept)."""
    import datasets

    from kvcache_bench.data.longbench import (
        ROW_SOURCE,
        DataRowError,
        _load_from_hub,
        read_local_jsonl_rows,
        refuse_oversized_file,
    )

    benchmark = BENCHMARKS[source]
    if task not in benchmark.data_dirs:
        raise DataRowError(f"{source} has no task {task!r}; it has {sorted(benchmark.data_dirs)}")
    if local_path:
        records = []
        for file in local_files(task, local_path):
            if file.endswith(".jsonl"):
                records += read_local_jsonl_rows(file)
            else:
                refuse_oversized_file(file)  # by its size, before datasets reads it
                loaded = datasets.load_dataset("parquet", data_files={split: [file]}, split=split)
                records += [{**row, ROW_SOURCE: f"{file}, row {i}"} for i, row in enumerate(loaded, start=1)]
    else:
        hub_id = hub_id or benchmark.hub_id
        data_dir = benchmark.data_dirs[task]
        loaded = _load_from_hub(hub_id, {"data_dir": data_dir} if data_dir else {}, split, dataset_name, task, revision)
        records = [
            {**row, ROW_SOURCE: f"{hub_id} ({data_dir or 'all'}), row {i}"} for i, row in enumerate(loaded, start=1)
        ]
    rows, other_lengths = [], set()
    for index, record in enumerate(records):
        if benchmark.row_tasks and record.get("task") not in (benchmark.row_tasks[task], None):
            continue
        missing = [c for c in (*LAYOUT_COLUMNS, benchmark.references) if c not in record]
        if missing:
            raise DataRowError(
                f"{record.get(ROW_SOURCE)}: lacks kvpress's columns {missing} (has "
                f"{sorted(k for k in record if k != ROW_SOURCE)})"
            )
        references = record[benchmark.references]
        references = [references] if isinstance(references, (str, int, float)) else list(references)
        if benchmark.answers_hidden:
            references = []  # kvpress stores "" for each: nothing to score against
        row = {
            "input": record["question"] or "",
            "context": record["context"],
            "answers": [str(r) for r in references],
            "answer_prefix": record["answer_prefix"] or "",
            "dataset": task,
            "language": "en",
            "all_classes": record.get("all_classes"),
            "_id": str(record.get("_id") or record.get("id") or f"{task}-{index}"),
            ROW_SOURCE: record.get(ROW_SOURCE),
        }
        if isinstance(record.get("length"), (int, float)) and not isinstance(record.get("length"), bool):
            row["length"] = int(record["length"])
        rows.append(row)
        if record.get("max_new_tokens") is not None:
            other_lengths.add(int(record["max_new_tokens"]))
    from kvcache_bench.study.prompts import MAX_NEW_TOKENS

    if other_lengths - {MAX_NEW_TOKENS[task]}:
        log.warning(
            "%s rows ask for max_new_tokens %s; the study generates %d for %s unless generation.max_new_tokens sets it",
            task,
            sorted(other_lengths),
            MAX_NEW_TOKENS[task],
            task,
        )
    return rows
