"""LooGLE's scores as kvpress's ``evaluation/benchmarks/loogle/calculate_metrics.py`` computes them.

* ``loogle_rouge_l``: its ROUGE-L *recall* from the ``rouge`` package
  (``get_scores(hyps=[prediction], refs=[answer])[0]["rouge-l"]["r"]``, 0 where the package raises), kvpress's
  rouge-l for the QA and summarisation tasks; its BLEU, METEOR (NLTK's WordNet, downloaded) and BERTScore (a
  BERT model from the hub) are not computed.
* ``loogle_cloze_exact`` (shortdep_cloze): the share of the answer's masks whose entity the prediction's dict
  gives exactly, read with ``ast.literal_eval`` where kvpress calls ``eval`` (a prediction that is no literal
  dict scores 0, as there). kvpress pools masks over the task (sum over sum); this is each example's share, the
  same mean when every example has as many masks.
"""

from __future__ import annotations

import ast


def loogle_rouge_l(prediction: str, reference: str, **_) -> float:
    """LooGLE's ROUGE-L recall as kvpress computes it; 0 where the rouge package raises (an empty side)."""
    from rouge import Rouge

    try:
        return Rouge().get_scores(hyps=[prediction], refs=[reference])[0]["rouge-l"]["r"]
    except (ValueError, RecursionError, KeyError):
        return 0.0


def _literal_dict(text: str) -> dict | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def loogle_cloze_exact(prediction: str, reference: str, **_) -> float:
    """LooGLE's cloze: the share of the answer's masks whose entity the predicted dict gives exactly."""
    answer, predicted = _literal_dict(reference), _literal_dict(prediction)
    if not answer or predicted is None:
        return 0.0
    return sum(predicted.get(mask) == entity for mask, entity in answer.items()) / len(answer)
