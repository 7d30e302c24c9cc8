"""Per-example scoring with the metric each benchmark publishes for the task.

LongBench (THUDM/LongBench ``metrics.py`` + ``eval.py``, English tasks) and RULER (NVIDIA/RULER
``scripts/eval/synthetic/constants.py`` + ``evaluate.py``) are matched definition by definition,
including their quirks, so a number here can be set beside a published one:

* ``qa_f1``: SQuAD normalisation (lower-case, drop ASCII punctuation, drop a/an/the, fold white
  space), token-multiset F1.
* ``classification``: LongBench's class-name containment rule, quirks kept (see the function).
* ``retrieval`` / ``count``: share of the numbers in the prediction that equal the answer.
* ``code_sim``: fuzzywuzzy's ``fuzz.ratio`` against the first line that is not a comment or fence.
* ``rouge``: ROUGE-L F from the ``rouge`` package (PyPI ``rouge==1.0.1``), the one LongBench's
  ``metrics.py`` calls (``Rouge().get_scores([prediction], [reference], avg=True)["rouge-l"]["f"]``):
  case-sensitive, words split on spaces (punctuation stays on words), a summary-level union LCS over
  '.'-separated sentences. Google's ``rouge-score`` gives other numbers (it lower-cases and tokenises),
  so it is not used: summarisation scores here compare with LongBench's table.
* ``string_match_all`` / ``string_match_part`` (RULER): case-insensitive substring containment; *all*
  averages over the references, *part* takes the best one.
* ``needle_rouge_l`` (kvpress's needle test, ``needle_in_haystack/calculate_metrics.py``): the same ``rouge``
  package called as kvpress calls it, ``Rouge().get_scores(needle.strip(), prediction.strip())[0]`` (the
  needle in the hypothesis' place), of which the score is ROUGE-L's F; kvpress also reports ROUGE-1 and -2.
  An empty prediction, which makes kvpress's call raise, scores 0.
* kvpress's other datasets, as their ``evaluation/benchmarks/*/calculate_metrics.py`` score them: LongBench-e
  with LongBench's metric of the base task (and kvpress's length buckets, ``length_bucket_means``);
  ``choice_stated`` (LongBench-v2: "The correct answer is (X)" or "... is X" after dropping "*");
  InfiniteBench's six text tasks (``infinitebench_*``, each over the example's whole reference list, as
  kvpress passes it); ``boxed_last`` (AIME25: the text after the last "boxed{" up to the first "}", which,
  quirk kept, is the whole prediction up to a "}" when nothing is boxed) and ``boxed_first`` (MATH500: the
  first "boxed{", none -> wrong; a nested brace, ``\boxed{\frac{1}{2}}``, cuts the answer at the first "}").
* InfiniteBench's code and math tasks as InfiniteBench's own ``compute_scores.py`` means them. kvpress's copy of it
  cannot score its own hub rows, whose labels are strings: ``code_run`` and ``math_calc`` compare a string with
  an int (always 0), ``code_debug`` reads ``label[1]`` of a one-letter list (IndexError), ``math_find`` raises
  TypeError. Here a label is read as the number it spells first (``code_run``: the last word an int equal to it;
  ``math_find``: the first number; ``math_calc``: the share of leading values right), ``code_debug`` takes the
  letter (kvpress's rows) or [function, letter] (InfiniteBench's).
* LooGLE (``loogle/calculate_metrics.py``): ``loogle_rouge_l`` is its ROUGE-L *recall* from the ``rouge`` package
  (``get_scores(hyps=[prediction], refs=[answer])[0]["rouge-l"]["r"]``, 0 where the package raises), kvpress's
  rouge-l for the QA and summarisation tasks; its BLEU, METEOR (NLTK's WordNet, downloaded) and BERTScore (a BERT
  model from the hub) are not computed. ``loogle_cloze_exact`` (shortdep_cloze): the share of the answer's masks
  whose entity the prediction's dict gives exactly, read with ``ast.literal_eval`` where kvpress calls ``eval``
  (a prediction that is no literal dict scores 0, as there). kvpress pools masks over the task (sum over sum);
  this is each example's share, the same mean when every example has as many masks.
* ZeroSCROLLS has no metric: its answers are hidden (``ANSWERS_HIDDEN``); kvpress's scorer returns ``{}``.

LongBench takes the best score over an example's references (``max`` starting from 0); RULER's
``string_match_all`` is the one metric that averages over them instead.
"""

from __future__ import annotations

import ast
import re
import string
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from kvcache_bench.study.prompts import (  # ZeroSCROLLS: predictions, and no score; LongBench-e's task list
    ANSWERS_HIDDEN,
    LONGBENCH_E_TASKS,
)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_NUMBERS = re.compile(r"\d+")
_PARAGRAPH_ID = re.compile(r"Paragraph (\d+)")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f]")


def normalize_answer(text: str) -> str:
    """LongBench/SQuAD normalisation: lower-case, drop punctuation, then articles, fold white space."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


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


def _share_of_numbers_equal_to(prediction: str, answer: str) -> float:
    """Numbers in the prediction that equal the answer, over all numbers in it (0 when it has none)."""
    numbers = _NUMBERS.findall(prediction)
    if not numbers:
        return 0.0
    return sum(number == str(answer) for number in numbers) / len(numbers)


def count_score(prediction: str, reference: str, **_) -> float:
    return _share_of_numbers_equal_to(prediction, reference)


def retrieval_score(prediction: str, reference: str, **_) -> float:
    """The reference names its paragraph ("Paragraph 12"); an unparsable reference is a data error."""
    match = _PARAGRAPH_ID.search(reference)
    if match is None:
        raise ValueError(f"retrieval reference does not name a paragraph ('Paragraph <n>'): {reference!r}")
    return _share_of_numbers_equal_to(prediction, match.group(1))


def classification_score(prediction: str, reference: str, all_classes=None, **_) -> float:
    """LongBench's rule: 1/k if the reference is among the k class names found in the prediction.

    Two quirks of the reference code are reproduced because they change published numbers:
    a class contained in the reference (but not equal to it) is dropped from the matches while the
    list is being iterated, so the match right after a dropped one escapes the check; and the
    closest-class fallback for predictions naming no class is unreachable there (its guard compares a
    list to 0), so such a prediction scores 0.
    """
    if not all_classes:
        raise ValueError("classification needs the example's all_classes (LongBench's label set)")
    matches = [name for name in all_classes if name in prediction]
    # Python's list iterator, spelled out: after a removal it still advances by one position.
    position = 0
    while position < len(matches):
        name = matches[position]
        if name in reference and name != reference:
            matches.remove(name)
        position += 1
    return 1.0 / len(matches) if reference in matches else 0.0


def code_sim_score(prediction: str, reference: str, **_) -> float:
    """fuzz.ratio (0-100, integer) / 100 against the first line without a fence or comment marker."""
    with warnings.catch_warnings():
        # Without python-Levenshtein fuzzywuzzy uses difflib, which is also what LongBench's pinned
        # environment ran; the warning only says it is slower.
        warnings.simplefilter("ignore", UserWarning)
        from fuzzywuzzy import fuzz
    first_code_line = next(
        (
            line
            for line in prediction.lstrip("\n").split("\n")
            if "`" not in line and "#" not in line and "//" not in line
        ),
        "",
    )
    return fuzz.ratio(first_code_line, reference) / 100


def rouge_l_score(prediction: str, reference: str, **_) -> float:
    """LongBench's ROUGE-L F; where the ``rouge`` package refuses the input (an empty side), 0 as in LongBench."""
    from rouge import Rouge

    try:
        return Rouge().get_scores([prediction], [reference], avg=True)["rouge-l"]["f"]
    except (ValueError, RecursionError):  # "Hypothesis is empty." / very long inputs: LongBench scores 0
        return 0.0


def contains_reference(prediction: str, reference: str, **_) -> float:
    """RULER's test: the reference appears in the prediction, ignoring case."""
    return 1.0 if reference.lower() in prediction.lower() else 0.0


def needle_rouge_l(prediction: str, reference: str, **_) -> float:
    """kvpress's needle score: ROUGE-L F with the needle (the reference) as the hypothesis, both stripped."""
    from rouge import Rouge

    if not prediction.strip() or not reference.strip():
        return 0.0  # the rouge package refuses an empty side ("Reference is empty."); nothing was found
    return Rouge().get_scores(reference.strip(), prediction.strip())[0]["rouge-l"]["f"]


def choice_stated(prediction: str, reference: str, **_) -> float:
    """LongBench-v2 as kvpress scores it: the prediction states the letter in LongBench's answer sentence."""
    prediction = prediction.replace("*", "")
    return float(
        f"The correct answer is ({reference})" in prediction or f"The correct answer is {reference}" in prediction
    )


def boxed_last(prediction: str, reference: str, **_) -> float:
    """AIME25 (kvpress): what follows the last "boxed{" up to the next "}" equals the answer."""
    return float(prediction.split("boxed{")[-1].split("}")[0] == str(reference))


def boxed_first(prediction: str, reference: str, **_) -> float:
    """MATH500 (kvpress): what follows the first "boxed{" up to the next "}" equals the answer;
    nothing boxed is wrong."""
    parts = prediction.split("boxed{")
    return float(len(parts) > 1 and parts[1].split("}")[0] == str(reference))


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
)


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
        }
        for record in predictions
    ]
