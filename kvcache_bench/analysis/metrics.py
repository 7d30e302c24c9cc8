"""Which metric scores each task, and one example's or one cell's score with it.

LongBench (THUDM/LongBench ``metrics.py`` + ``eval.py``, English tasks), RULER (NVIDIA/RULER
``scripts/eval/synthetic/constants.py`` + ``evaluate.py``) and kvpress's other datasets (its
``evaluation/benchmarks/*/calculate_metrics.py``) are matched definition by definition, including their quirks,
so a number here can be set beside a published one. The scoring functions are in ``analysis/scorers/``, one
module per benchmark (``longbench``, ``ruler_needle``, ``infinitebench``, ``loogle``, ``boxed_answers``); this
module holds what joins them to the study's tasks:

* ``METRICS`` names each function and says how it meets an example's references; ``*_TASK_METRICS`` and
  ``TASK_METRICS`` give each task its metric (``metric_for``).
* ``prepare_prediction`` cuts a prediction as the benchmark's evaluator does (LongBench's first line for its
  few-shot tasks, RULER's printable text), and ``score_example`` / ``score_records`` score it.
* LongBench-e is scored with LongBench's metric of the base task (and kvpress's length buckets,
  ``length_bucket_means``); ``task_score`` is a benchmark's headline number.
* ZeroSCROLLS has no metric: its answers are hidden (``ANSWERS_HIDDEN``); kvpress's scorer returns ``{}``.

LongBench takes the best score over an example's references (``max`` starting from 0); RULER's
``string_match_all`` is the one metric that averages over them instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kvcache_bench.analysis.scorers.boxed_answers import boxed_first, boxed_last
from kvcache_bench.analysis.scorers.infinitebench import (
    infinitebench_choice,
    infinitebench_code_debug,
    infinitebench_code_run,
    infinitebench_dialogue,
    infinitebench_first_integer,
    infinitebench_kv_retrieval,
    infinitebench_math_calc,
    infinitebench_math_find,
    infinitebench_qa_f1,
)
from kvcache_bench.analysis.scorers.longbench import (
    choice_stated,
    classification_score,
    code_sim_score,
    count_score,
    qa_f1_score,
    retrieval_score,
    rouge_l_score,
)
from kvcache_bench.analysis.scorers.loogle import loogle_cloze_exact, loogle_rouge_l
from kvcache_bench.analysis.scorers.ruler_needle import contains_reference, needle_rouge_l
from kvcache_bench.study.prompts import (  # ZeroSCROLLS: predictions, and no score; LongBench-e's task list
    ANSWERS_HIDDEN,
    LONGBENCH_E_TASKS,
)

# RULER's evaluator replaces control characters in a prediction before matching (prepare_prediction)
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f]")


@dataclass(frozen=True)
class Metric:
    name: str
    per_reference: Callable[..., float]
    # "max" (best reference, starting from 0), "mean" (share of references hit) or "all" (the metric reads the
    # example's whole reference list, as InfiniteBench's scorers do)
    over_references: str


METRICS: dict[str, Metric] = {
    metric.name: metric
    for metric in (
        Metric("qa_f1", qa_f1_score, "max"),
        Metric("rouge_l", rouge_l_score, "max"),
        Metric("classification", classification_score, "max"),
        Metric("retrieval", retrieval_score, "max"),
        Metric("count", count_score, "max"),
        Metric("code_sim", code_sim_score, "max"),
        Metric("string_match_all", contains_reference, "mean"),
        Metric("string_match_part", contains_reference, "max"),
        Metric("needle_rouge_l", needle_rouge_l, "max"),
        Metric("choice_stated", choice_stated, "max"),
        Metric("boxed_last", boxed_last, "max"),
        Metric("boxed_first", boxed_first, "max"),
        Metric("infinitebench_kv_retrieval", infinitebench_kv_retrieval, "all"),
        Metric("infinitebench_first_integer", infinitebench_first_integer, "all"),
        Metric("infinitebench_qa_f1", infinitebench_qa_f1, "all"),
        Metric("infinitebench_dialogue", infinitebench_dialogue, "all"),
        Metric("infinitebench_choice", infinitebench_choice, "all"),
        Metric("infinitebench_code_run", infinitebench_code_run, "all"),
        Metric("infinitebench_code_debug", infinitebench_code_debug, "all"),
        Metric("infinitebench_math_find", infinitebench_math_find, "all"),
        Metric("infinitebench_math_calc", infinitebench_math_calc, "all"),
        Metric("loogle_rouge_l", loogle_rouge_l, "max"),
        Metric("loogle_cloze_exact", loogle_cloze_exact, "max"),
    )
}

LONGBENCH_TASK_METRICS = {
    "narrativeqa": "qa_f1",
    "qasper": "qa_f1",
    "multifieldqa_en": "qa_f1",
    "hotpotqa": "qa_f1",
    "2wikimqa": "qa_f1",
    "musique": "qa_f1",
    "gov_report": "rouge_l",
    "qmsum": "rouge_l",
    "multi_news": "rouge_l",
    "samsum": "rouge_l",
    "trec": "classification",
    "triviaqa": "qa_f1",
    "passage_count": "count",
    "passage_retrieval_en": "retrieval",
    "lcc": "code_sim",
    "repobench-p": "code_sim",
}
RULER_TASK_METRICS = {
    **{
        task: "string_match_all"
        for task in (
            "niah_single_1",
            "niah_single_2",
            "niah_single_3",
            "niah_multikey_1",
            "niah_multikey_2",
            "niah_multikey_3",
            "niah_multivalue",
            "niah_multiquery",
            "vt",
            "cwe",
            "fwe",
        )
    },
    "qa_1": "string_match_part",
    "qa_2": "string_match_part",
}
NEEDLE_TASK_METRICS = {"needle_in_haystack": "needle_rouge_l"}
KVPRESS_LAYOUT_TASK_METRICS = {
    **{f"{task}_e": LONGBENCH_TASK_METRICS[task] for task in LONGBENCH_E_TASKS},
    "longbench_v2": "choice_stated",
    "passkey": "infinitebench_first_integer",
    "number_string": "infinitebench_first_integer",
    "kv_retrieval": "infinitebench_kv_retrieval",
    "longbook_qa_eng": "infinitebench_qa_f1",
    "longdialogue_qa_eng": "infinitebench_dialogue",
    "longbook_choice_eng": "infinitebench_choice",
    "code_run": "infinitebench_code_run",
    "code_debug": "infinitebench_code_debug",
    "math_find": "infinitebench_math_find",
    "math_calc": "infinitebench_math_calc",
    "shortdep_qa": "loogle_rouge_l",
    "longdep_qa": "loogle_rouge_l",
    "longdep_summarization": "loogle_rouge_l",
    "shortdep_cloze": "loogle_cloze_exact",
    "aime25": "boxed_last",
    "math500": "boxed_first",
}

TASK_METRICS = {
    **LONGBENCH_TASK_METRICS,
    **RULER_TASK_METRICS,
    **NEEDLE_TASK_METRICS,
    **KVPRESS_LAYOUT_TASK_METRICS,
    "synthetic_qa": "qa_f1",
}

# LongBench's eval.py scores only the first line of these few-shot tasks' predictions (the model
# tends to continue the few-shot pattern with another question).
FIRST_LINE_TASKS = frozenset({"trec", "triviaqa", "samsum", "lsht", "trec_e", "triviaqa_e", "samsum_e"})


def metric_for(task: str) -> Metric:
    if task in ANSWERS_HIDDEN:
        raise ValueError(f"{task} has no score: ZeroSCROLLS hides its answers (its leaderboard scores predictions)")
    try:
        return METRICS[TASK_METRICS[task]]
    except KeyError:
        raise ValueError(f"no metric registered for task {task!r}; known: {sorted(TASK_METRICS)}") from None


def prepare_prediction(task: str, prediction: str) -> str:
    """What the benchmark's evaluator looks at: LongBench's first line, RULER's printable text."""
    if task in FIRST_LINE_TASKS:
        return prediction.lstrip("\n").split("\n")[0]
    if task in RULER_TASK_METRICS:
        return _CONTROL_CHARACTERS.sub("\n", prediction.strip()).strip()
    return prediction


def score_example(task: str, prediction: str, references: list[str], all_classes=None) -> float:
    """One example's score in [0, 1]; no references is a data error, not a zero."""
    metric = metric_for(task)
    if not references:
        raise ValueError(f"{task}: example has no reference answers")
    prediction = prepare_prediction(task, prediction)
    if metric.over_references == "all":
        return metric.per_reference(prediction, list(references), all_classes=all_classes)
    per_reference = [metric.per_reference(prediction, reference, all_classes=all_classes) for reference in references]
    if metric.over_references == "mean":
        return sum(per_reference) / len(per_reference)
    return max([0.0, *per_reference])


# LongBench-e's buckets of the rows' length (LongBench's word count), as kvpress's scorer_e cuts them
LENGTH_BUCKETS = (("0-4k", 4000), ("4-8k", 8000), ("8k+", float("inf")))


def length_bucket_means(scores: list[float], lengths: list[int]) -> dict[str, float]:
    """kvpress's LongBench-e result: the mean x100 (2 places) of each length bucket (NaN for an empty one)."""
    buckets: dict[str, list[float]] = {name: [] for name, _ in LENGTH_BUCKETS}
    for score, length in zip(scores, lengths, strict=True):
        buckets[next(name for name, below in LENGTH_BUCKETS if length < below)].append(score)
    return {name: round(100 * sum(v) / len(v), 2) if v else float("nan") for name, v in buckets.items()}


def task_score(per_example: list[float]) -> float:
    """The benchmark's headline number: mean x100, rounded to 2 places."""
    if not per_example:
        raise ValueError("no examples to average")
    return round(100 * sum(per_example) / len(per_example), 2)


# What the generate job measured about each example beside its answer (kvcache_bench.analysis.measured reads them).
MEASURED_FIELDS = (
    "effective_retention",
    "truncated",
    "prompt_tokens",
    "original_prompt_tokens",
    "compressed_while_decoding",
    "sliding_layers",
    "sliding_layers_default",
)

# A multi-turn example's place in its conversation (issue 52; analysis.multi_turn reads them), kept when the
# prediction has them: a record of another mode is as it was.
TURN_FIELDS = ("turn", "turns", "conversation_id", "multi_turn_history")


def score_records(task: str, predictions: list[dict]) -> list[dict]:
    name = metric_for(task).name
    return [
        {
            "id": record["id"],
            "metric": name,
            "score": score_example(task, record["prediction"], record["references"], record.get("all_classes")),
            "prediction": record["prediction"],
            "references": record["references"],
            **{field: record.get(field) for field in MEASURED_FIELDS},  # asked vs measured, for the table
            **{field: record[field] for field in TURN_FIELDS if field in record},
        }
        for record in predictions
    ]
