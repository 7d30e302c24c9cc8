"""RULER's string match and kvpress's needle test's ROUGE-L: the scorers of the synthetic long-context tests.

RULER's from NVIDIA/RULER ``scripts/eval/synthetic/constants.py`` + ``evaluate.py``; the needle test's from
kvpress's ``evaluation/benchmarks/needle_in_haystack/calculate_metrics.py``.

* ``string_match_all`` / ``string_match_part`` (RULER): case-insensitive substring containment; *all*
  averages over the references, *part* takes the best one (``analysis.metrics`` combines them so).
* ``needle_rouge_l`` (kvpress's needle test): the ``rouge`` package called as kvpress calls it,
  ``Rouge().get_scores(needle.strip(), prediction.strip())[0]`` (the needle in the hypothesis' place), of which
  the score is ROUGE-L's F; kvpress also reports ROUGE-1 and -2. An empty prediction, which makes kvpress's
  call raise, scores 0.
"""

from __future__ import annotations


def contains_reference(prediction: str, reference: str, **_) -> float:
    """RULER's test: the reference appears in the prediction, ignoring case."""
    return 1.0 if reference.lower() in prediction.lower() else 0.0


def needle_rouge_l(prediction: str, reference: str, **_) -> float:
    """kvpress's needle score: ROUGE-L F with the needle (the reference) as the hypothesis, both stripped."""
    from rouge import Rouge

    if not prediction.strip() or not reference.strip():
        return 0.0  # the rouge package refuses an empty side ("Reference is empty."); nothing was found
    return Rouge().get_scores(reference.strip(), prediction.strip())[0]["rouge-l"]["f"]
