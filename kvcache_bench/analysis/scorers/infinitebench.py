"""InfiniteBench's ten English tasks, each scored over the example's whole reference list, as kvpress passes it.

* The six text tasks (passkey, number_string, kv_retrieval, longbook_qa_eng, longdialogue_qa_eng,
  longbook_choice_eng) as kvpress's ``evaluation/benchmarks/infinitebench/calculate_metrics.py`` scores them.
* The code and math tasks as InfiniteBench's own ``compute_scores.py`` means them. kvpress's copy of it
  cannot score its own hub rows, whose labels are strings: ``code_run`` and ``math_calc`` compare a string with
  an int (always 0), ``code_debug`` reads ``label[1]`` of a one-letter list (IndexError), ``math_find`` raises
  TypeError. Here a label is read as the number it spells first (``code_run``: the last word an int equal to
  it; ``math_find``: the first number; ``math_calc``: the share of leading values right), ``code_debug`` takes
  the letter (kvpress's rows) or [function, letter] (InfiniteBench's).
"""

from __future__ import annotations

import re

from kvcache_bench.analysis.scorers.longbench import qa_f1_score  # longbook_qa_eng is LongBench's QA F1

_INFINITEBENCH_SEPARATORS = ["\n", ":", '"', "'", ".", ",", "?", "!", "{", "}"]


def _first_integer(prediction: str) -> str:
    return next((item for item in re.split("[^0-9]", prediction) if item != ""), "")


def infinitebench_kv_retrieval(prediction: str, references: list[str], **_) -> float:
    for separator in _INFINITEBENCH_SEPARATORS:
        prediction = prediction.replace(separator, " ")
    return float(references[0] in prediction.split())


def infinitebench_first_integer(prediction: str, references: list[str], **_) -> float:
    """passkey and number_string: the first run of digits is the answer."""
    return float(references[0] == _first_integer(prediction))


def infinitebench_qa_f1(prediction: str, references: list[str], **_) -> float:
    return max([0.0, *(qa_f1_score(prediction, reference) for reference in references)])


def infinitebench_dialogue(prediction: str, references: list[str], **_) -> float:
    """longdialogue_qa_eng: any reference name appears in the prediction, ignoring case."""
    upper = prediction.strip().upper()
    return float(any(reference.upper() in upper for reference in references))


def infinitebench_choice(prediction: str, references: list[str], **_) -> float:
    """longbook_choice_eng, kvpress's order of tests: the last lone A-D, the first character, the whole
    prediction, an answer phrase's next word, then the first word that is one of A-D."""
    prediction = prediction.strip()
    match = re.search(r"\b[A-D]\b(?!.*\b[A-D]\b)", prediction)
    if match and match.group(0) in references:
        return 1.0
    if prediction == "":
        return 0.0
    if prediction[0] in "ABCD":
        return float(prediction[0] in references)
    if prediction in references:
        return 1.0
    for separator in ["\n", '"', "'", ".", ",", "?", "!", "{", "}"]:
        prediction = prediction.replace(separator, " ")
    while "  " in prediction:
        prediction = prediction.replace("  ", " ")
    for phrase in ("answer is:", "answer:", "answer is", "option is"):
        at = prediction.find(phrase)
        if at == -1:
            continue
        if len(prediction) < at + len(phrase) + 1:
            return 0.0
        after = prediction[at + len(phrase) + 1 :]
        return float(any(after.startswith(reference) for reference in references))
    # kvpress tests `word in "ABCD"`: a substring test, so "AB" or "" counts as a choice
    word = next((word for word in prediction.split() if word in "ABCD"), None)
    return float(word in references) if word is not None else 0.0


def _number(label: str) -> int | float | None:
    """The number a label spells (InfiniteBench's labels are typed; kvpress's hub rows hold them as strings)."""
    text = str(label).strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return None


def infinitebench_code_run(prediction: str, references: list[str], **_) -> float:
    """code_run: the prediction's last word is an int equal to the label."""
    for separator in ["\n", ".", "`", "'", '"', ":"]:
        prediction = prediction.strip().replace(separator, " ")
    words = prediction.split()
    try:
        return float(bool(words) and int(words[-1]) == _number(references[0]))
    except ValueError:
        return 0.0


def infinitebench_code_debug(prediction: str, references: list[str], **_) -> float:
    """code_debug, InfiniteBench's order of tests: the last lone A-J, the prediction opening with the letter or the
    function's name, then the text after an answer phrase."""
    letter, function = references[-1], (references[0] if len(references) > 1 else None)
    prediction = prediction.strip()
    match = re.search(r"\b[A-J]\b(?!.*\b[A-J]\b)", prediction)
    if match and match.group(0) == letter:
        return 1.0
    for separator in ["\n", "`", "'", '"', "-", "*", "Option", "option"]:
        prediction = prediction.replace(separator, " ")
    while "  " in prediction:
        prediction = prediction.replace("  ", " ")
    openings = [letter] + ([function] if function else [])
    if any(prediction.startswith(opening) for opening in openings):
        return 1.0
    for phrase in ("answer is:", "is:", "answer:", "correct option is:"):
        at = prediction.find(phrase)
        if at == -1:
            continue
        after = prediction[at + len(phrase) + 1 :]
        return float(len(prediction) >= at + len(phrase) + 1 and any(after.startswith(o) for o in openings))
    return 0.0


def infinitebench_math_find(prediction: str, references: list[str], **_) -> float:
    """math_find: the prediction's first number equals the label (as an int for an int label)."""
    label = _number(references[0])
    found = re.search(r"\d+\.\d+|\d+", prediction)
    if found is None or label is None:
        return 0.0
    return float((int(float(found.group(0))) if isinstance(label, int) else float(found.group(0))) == label)


def infinitebench_math_calc(prediction: str, references: list[str], **_) -> float:
    """math_calc: the share of the expected values the prediction's integers give in order,
    up to the first wrong one."""
    labels = [_number(label) for label in references]
    predicted = [int(item) for item in re.split("[^0-9]", prediction) if item != ""]
    right = 0
    for label, value in zip(labels, predicted):
        if label != value:
            break
        right += 1
    return right / len(labels)
