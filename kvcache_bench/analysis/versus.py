"""Which methods a figure draws in colour: yours against the field, on one set of axes.

A researcher's question is "how does my press do against the strongest methods and the ones every paper
compares with?", not "how do forty methods look in eight panels". So a figure draws in colour: the
highlighted methods (``figures.highlight``; by default every custom press and the full cache), the study's
strongest (``figures.strongest`` of them, by mean score), and the classic baselines that every KV-cache
paper reports (``CLASSIC_BASELINES``). The other methods are drawn faint behind them, without a legend entry
each (``results/tables/ranking.md`` names them all, and ``quality_by_family`` draws every method in colour).
A study of at most ``ALL_IN_COLOUR_UP_TO`` compressed methods draws all of them in colour.

Light on purpose (no matplotlib): the workflow reads it when it is parsed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcache_bench.escaping import rst_text, script_safe
from kvcache_bench.methods.registry import METHODS, method_label

if TYPE_CHECKING:
    import pandas as pd

BASELINE_METHOD = "full_cache"
CLASSIC_BASELINES = ("snapkv", "streaming_llm", "knorm", "random")
ALL_IN_COLOUR_UP_TO = 8  # compressed methods; past this, the versus view and the family appendix
STRONGEST = 3
# The multi-turn mode's wildcard string (study.question_modes.QuestionMode.MULTI_TURN, issue 52): analysis names the
# modes by their strings, and the workflow reads this one at parse to make the multi-turn tables and figure.
MULTI_TURN_MODE = "multi_turn"
# multi-turn last: it is question-aware's first turn followed by a conversation, read after the one-question modes
QUESTION_MODE_ORDER = ("question_aware", "question_agnostic", "other_question", "same_question", MULTI_TURN_MODE)


def modes_in_order(modes) -> list[str]:
    """Question modes as a reader compares them: saw this question, none, another, this one removed, a conversation."""
    modes = set(modes)
    return [m for m in QUESTION_MODE_ORDER if m in modes] + sorted(modes - set(QUESTION_MODE_ORDER))


def labeller(frame: pd.DataFrame | None = None, labels: dict[str, str] | None = None):
    """``label(method)``: the label the table carries (a custom press's ``label``, written by the aggregate
    job from the config) or ``labels`` gives (a rule's params, for tables without the column), else the
    catalogue's (committed tables made before labels were a column)."""
    labels = dict(labels or {})
    if frame is not None and "label" in frame:
        labels.update({m: text for m, text in zip(frame["method"], frame["label"]) if isinstance(text, str)})
    # a blank label (spaces, a newline) left the method's cell in every table empty: such a method goes by its name
    labels = {method: text for method, text in labels.items() if text and text.strip()}

    def label(method: str) -> str:
        return labels.get(method) or method_label(method)

    return label


def label_of(name: str, custom_methods: dict | None) -> str:
    """How tables, legends and captions name a method: its label (a custom press's ``label``), or its name when
    that label is blank. Here, not in the registry: the registry is part of every generate job's code hash, and a
    label is no part of a prediction."""
    label = method_label(name, custom_methods)
    return label if label.strip() else name


def default_highlight(methods, custom_methods: dict | None) -> list[str]:
    """``figures.highlight`` when unset: the full cache and every custom press of the study."""
    custom = set(custom_methods or {})
    return [BASELINE_METHOD] + [m for m in methods if m in custom and m != BASELINE_METHOD]


def highlight_caption(labels: dict[str, str]) -> dict:
    """What a figure's report caption (report/*.rst, ``snakemake.params.report_caption.highlight``) names as drawn
    bold: ``{"highlight": "Full cache, Value norm"}``, each label literal in reStructuredText. Snakemake renders a
    caption with Jinja, then docutils: a label put there as it is was markup ('*d*' emphasis, 'javascript:alert(1)' a
    link, and '.. include:: /etc/hostname' on a line of its own put that file into the report). A dict, not a str:
    Snakemake formats a str param with the wildcards, and a '{' in a label would be read as one; a ``script_safe``
    one, since the report also shows it among the job's params (rules/common.smk)."""
    return script_safe({"highlight": ", ".join(rst_text(label) for label in labels.values())})


def primary_mode(frame: pd.DataFrame) -> str | None:
    modes = modes_in_order(frame["question_mode"]) if not frame.empty else []
    return modes[0] if modes else None


def mean_scores(frame: pd.DataFrame) -> dict[str, float]:
    """Each compressed method's mean score over its cells in the primary question mode (question-aware when
    the study ran it), over the retentions it compressed at (a method that keeps the whole cache or sets its own
    budget: over its retention-1.0 cells): the order of legends and of "strongest"."""
    mode = primary_mode(frame)
    rows = frame[(frame["question_mode"] == mode) & (frame["method"] != BASELINE_METHOD)]
    compressed = rows[rows["retention"] < 1.0]
    whole = rows[~rows["method"].isin(set(compressed["method"]))]
    return {
        **whole.groupby("method")["score"].mean().to_dict(),
        **compressed.groupby("method")["score"].mean().to_dict(),
    }


def by_score(methods, scores: dict[str, float]) -> list[str]:
    """Best first; ties (and methods without a score) in the catalogue's order."""
    order = {name: index for index, name in enumerate(METHODS)}
    return sorted(methods, key=lambda m: (-scores.get(m, float("-inf")), order.get(m, len(order)), m))


def versus_methods(frame: pd.DataFrame, highlight=(), strongest: int = STRONGEST) -> tuple[list[str], list[str]]:
    """(drawn in colour, drawn faint) among the compressed methods of ``frame`` (summary rows).

    In colour, in legend order: the highlighted methods, then the strongest and the classic baselines by
    score. With at most ``ALL_IN_COLOUR_UP_TO`` methods every one is in colour, highlighted first."""
    scores = mean_scores(frame)
    methods = by_score(set(frame["method"]) - {BASELINE_METHOD}, scores)
    highlighted = [m for m in highlight if m in methods]
    if len(methods) <= ALL_IN_COLOUR_UP_TO:
        return highlighted + [m for m in methods if m not in highlighted], []
    rest = [m for m in methods if m not in highlighted]
    # the strongest that compressed (a 4-bit cache scoring like the full cache is not a press to beat at 10%)
    compressing = set(frame.loc[frame["retention"] < 1.0, "method"])
    contenders = [m for m in rest if m not in CLASSIC_BASELINES and m in compressing]
    chosen = set(contenders[:strongest]) | {m for m in rest if m in CLASSIC_BASELINES}
    return highlighted + [m for m in rest if m in chosen], [m for m in rest if m not in chosen]
