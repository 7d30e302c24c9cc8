"""AIME25's and MATH500's scores as kvpress computes them: the answer in ``\\boxed{}`` equals the reference.

From the two datasets' ``evaluation/benchmarks/*/calculate_metrics.py`` in kvpress.

* ``boxed_last`` (AIME25): the text after the last "boxed{" up to the first "}", which, quirk kept, is the whole
  prediction up to a "}" when nothing is boxed.
* ``boxed_first`` (MATH500): the first "boxed{", none -> wrong; a nested brace, ``\\boxed{\\frac{1}{2}}``,
  cuts the answer at the first "}".
"""

from __future__ import annotations


def boxed_last(prediction: str, reference: str, **_) -> float:
    """AIME25 (kvpress): what follows the last "boxed{" up to the next "}" equals the answer."""
    return float(prediction.split("boxed{")[-1].split("}")[0] == str(reference))


def boxed_first(prediction: str, reference: str, **_) -> float:
    """MATH500 (kvpress): what follows the first "boxed{" up to the next "}" equals the answer;
    nothing boxed is wrong."""
    parts = prediction.split("boxed{")
    return float(len(parts) > 1 and parts[1].split("}")[0] == str(reference))
