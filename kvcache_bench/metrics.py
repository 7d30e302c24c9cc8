"""LongBench's scoring, per example: normalise, token F1, max over the references."""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """LongBench/SQuAD normalisation: lower-case, drop punctuation and articles, fold white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction_tokens: list[str], reference_tokens: list[str]) -> float:
    common = Counter(prediction_tokens) & Counter(reference_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(prediction_tokens)
    recall = overlap / len(reference_tokens)
    return 2 * precision * recall / (precision + recall)


def qa_f1_score(prediction: str, reference: str, **_) -> float:
    return token_f1(normalize_answer(prediction).split(), normalize_answer(reference).split())


TASK_METRICS = {
    "qasper": ("qa_f1", qa_f1_score),
    "synthetic_qa": ("qa_f1", qa_f1_score),
}


def metric_for(task: str):
    try:
        return TASK_METRICS[task]
    except KeyError:
        raise ValueError(f"no metric registered for task {task!r}; known: {sorted(TASK_METRICS)}") from None


def score_example(task: str, prediction: str, references: list[str], all_classes=None) -> float:
    """Best score over the references, in [0, 1] (LongBench's ``scorer`` per example)."""
    _, metric = metric_for(task)
    if not references:
        return 0.0
    return max(metric(prediction, reference, all_classes=all_classes) for reference in references)


def score_records(task: str, predictions: list[dict]) -> list[dict]:
    name, _ = metric_for(task)
    return [
        {
            "id": record["id"],
            "metric": name,
            "score": score_example(task, record["prediction"], record["references"], record.get("all_classes")),
            "prediction": record["prediction"],
            "references": record["references"],
        }
        for record in predictions
    ]
